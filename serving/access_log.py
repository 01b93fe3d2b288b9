"""gunicorn's access log, one request one line (issue 44, finding 6): gunicorn.conf.py's
logger_class. gunicorn writes its access lines itself, past the formatters of
serving/logs.py, and its atoms carry what the client sent: %(U)s is the path already
percent-decoded, so `GET /v1/x%0a10.0.0.9 - "GET /admin/ ...` wrote a second, forged line,
and a header such as the user agent is the client's to fill. Here the path is the one the
client sent, still percent-encoded (RAW_URI up to its query string, which is never logged),
and every text atom has its control characters escaped as the app's own lines do, and
anything shaped like a secret redacted."""

from __future__ import annotations

from gunicorn.glogging import Logger

from serving.logs import escape, redact


def _safe(value: object) -> object:
    return redact(escape(value)) if isinstance(value, str) else value


class AccessLogger(Logger):
    """gunicorn's Logger with the path as sent and every text atom on one line."""

    def atoms(self, resp, req, environ, request_time) -> dict:
        atoms = super().atoms(resp, req, environ, request_time)
        raw_uri = environ.get("RAW_URI") or "-"
        atoms["U"] = raw_uri.split("?", 1)[0]
        return {name: _safe(value) for name, value in atoms.items()}
