"""Changelist filters given values no column can hold: refused or ignored, never a 500."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("url_name", "params"),
    [
        ("admin:ledger_app_charge_changelist", {"currency": "\x00"}),
        ("admin:ledger_app_refund_changelist", {"charge__id__exact": "\x00"}),
    ],
)
def test_nul_in_admin_filters_is_a_400_not_a_500(admin_client, url_name, params):
    assert admin_client.get(reverse(url_name), params).status_code == 400


def test_a_non_ascii_digit_user_filter_is_ignored(admin_client):
    response = admin_client.get(reverse("admin:ledger_app_refund_changelist"), {"created_by": "²"})

    assert response.status_code == 200
