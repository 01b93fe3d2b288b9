"""schemathesis against /v1/openapi.json, served in-process: the schema, the checks every
response must pass, and the fixtures the API's and the webhook endpoints' schema tests share."""

from __future__ import annotations

import json

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks as generic_checks
from schemathesis.specs.openapi import checks as openapi_checks

from backoffice.wsgi import application

schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", application)


# Bounded so the file runs in well under a minute on SQLite; derandomized so a run is
# reproducible (the same requests every time) and no example database is kept.
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def request_id_and_error_envelope(ctx, response, case):
    """Every response has a Request-Id; every error is {"error": {type, code, message}}."""
    request_id = response.headers.get("request-id") or []
    assert request_id and request_id[0].startswith("req_"), "no Request-Id header"
    if response.status_code >= 400:
        body = json.loads(response.content)
        assert set(body) == {"error"}, body
        error = body["error"]
        for name in ("type", "code", "message"):
            assert isinstance(error.get(name), str) and error[name], error


NO_SERVER_ERROR_AND_DOCUMENTED = [
    generic_checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    request_id_and_error_envelope,
]


ALL_CHECKS = [*NO_SERVER_ERROR_AND_DOCUMENTED, openapi_checks.response_schema_conformance]
