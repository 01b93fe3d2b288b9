"""Exit 0 when the PostgreSQL at the given URL answers, 1 otherwise (prints why)."""

import sys

import dj_database_url
import psycopg


def main(url: str) -> int:
    config = dj_database_url.parse(url)
    if config["ENGINE"] != "django.db.backends.postgresql":
        print(f"not a PostgreSQL URL: {url}")
        return 1
    try:
        psycopg.connect(
            host=config["HOST"] or None,
            port=config["PORT"] or None,
            user=config["USER"] or None,
            password=config["PASSWORD"] or None,
            dbname=config["NAME"],
            connect_timeout=3,
        ).close()
    except psycopg.Error as exc:
        print(f"PostgreSQL at {url} is not reachable: {exc}".strip())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
