"""An admin list's rows as its page draws them, for tests that read what staff see."""

from __future__ import annotations

from html.parser import HTMLParser

from django.test import Client


class ResultRows(HTMLParser):
    """The rows of an admin list as its page draws them: each cell's text and links, by the
    column's list_display name (Django's `field-<name>` class)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.rows: list[dict[str, dict[str, list[str]]]] = []
        self._column: str | None = None
        self._in_body = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append({})
        elif self._in_body and tag in ("td", "th"):
            classes = (found.get("class") or "").split()
            named = [c.removeprefix("field-") for c in classes if c.startswith("field-")]
            self._column = named[0] if named else None
            if self._column:
                self.rows[-1][self._column] = {"text": [], "links": []}
        elif tag == "a" and self._column:
            self.rows[-1][self._column]["links"].append(found.get("href") or "")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._column = None
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data):
        if self._column and data.strip():
            self.rows[-1][self._column]["text"].append(data.strip())


def listed(client: Client, url: str, **query: str) -> list[dict[str, dict[str, list[str]]]]:
    page = client.get(url, query)
    assert page.status_code == 200, page.content[:300]
    return ResultRows(page.content.decode()).rows


def text(cell: dict[str, list[str]]) -> str:
    return " ".join(cell["text"])
