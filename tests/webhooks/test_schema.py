"""schemathesis against /v1/webhook_endpoints, as tests/api/test_schema.py does for charges
and refunds: generated requests never get a 5xx, and every answer matches the schema.
Private URLs are allowed here, so no generated host is looked up in DNS."""

import pytest

from tests.api.schema_checks import ALL_CHECKS, FUZZ, schema

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("wsgi_in_test_transaction", "allow_private"),
]


@schema.include(path_regex="^/v1/webhook_endpoints").parametrize()
@FUZZ
def test_fuzzed_webhook_endpoint_requests_conform(case, auth, endpoint):
    case.call_and_validate(headers=auth, checks=ALL_CHECKS)
