"""HTTP Basic credentials that cannot be a key are refused as unauthenticated."""

import pytest

from tests.api.conftest import basic_auth

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("secret", ["sk_\x00" + "a" * 39, "sk_" + "é" * 40, "sk_" + "a" * 41])
def test_malformed_basic_credentials_are_401(client, secret):
    response = client.get("/v1/charges", HTTP_AUTHORIZATION=basic_auth(secret))

    assert response.status_code == 401
