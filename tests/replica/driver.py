"""The app, run in its own process against a primary and its replica (DATABASE_URL and
DATABASE_REPLICA_URL), driven by test_read_replica.py one JSON line at a time.

Each line on stdin is a request, answered by one JSON line on stdout:

- {"method": "GET", "path": "/v1/refunds", "as": "api" | "admin", "key": secret?,
   "json": {...}?, "form": {...}?, "headers": {...}?}
  -> {"status": 200, "headers": {...}, "json": ... or "text": ..., "warnings": [...]}
  through Django's test Client: "api" with the API key (or `key`), "admin" logged in as a
  superuser. `warnings` are what ledger_app.replica logged meanwhile.
- {"op": "api_key"} -> {"key": secret, "prefix": prefix}: a new read-write key.
- {"op": "revoke", "prefix": prefix} -> {}.
"""

import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for `tests`

# Answers go to the real stdout; anything else printed goes to stderr (the log file).
answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
sys.stdout = sys.stderr

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backoffice.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402

from ledger_app.access.api_keys import create_api_key, revoke_api_key  # noqa: E402
from tests.second_factor import verified  # noqa: E402


class Remember(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main() -> None:
    warnings = Remember()
    logging.getLogger("ledger_app.replica").addHandler(warnings)
    api_secret = create_api_key(name="replica test")[1]
    admin = get_user_model().objects.create_superuser("replica-admin", password=None)
    clients = {"api": Client(), "admin": Client()}
    verified(clients["admin"], admin)  # its actions move money: a code, as a person
    for line in sys.stdin:
        command = json.loads(line)
        warnings.messages.clear()
        answer = run(command, clients, api_secret)
        answer["warnings"] = list(warnings.messages)
        answers.write(json.dumps(answer) + "\n")


def run(command: dict, clients: dict, api_secret: str) -> dict:
    op = command.get("op")
    if op == "api_key":
        key, secret = create_api_key(name="made while the replica is behind")
        return {"key": secret, "prefix": key.prefix}
    if op == "revoke":
        revoke_api_key(prefix=command["prefix"])
        return {}
    headers = dict(command.get("headers", {}))
    if command.get("as", "api") == "api":
        headers["Authorization"] = f"Bearer {command.get('key') or api_secret}"
    client = clients[command.get("as", "api")]
    method = command["method"].lower()
    if "json" in command:
        body = {"data": json.dumps(command["json"]), "content_type": "application/json"}
    elif "form" in command:
        body = {"data": command["form"]}  # multipart, as a browser posts the admin's forms
    else:
        body = {}
    response = getattr(client, method)(command["path"], headers=headers, **body)
    answer = {"status": response.status_code, "headers": dict(response.headers)}
    if response.headers.get("Content-Type", "").startswith("application/json"):
        answer["json"] = response.json()
    else:
        answer["text"] = response.content.decode()
    return answer


if __name__ == "__main__":
    main()
