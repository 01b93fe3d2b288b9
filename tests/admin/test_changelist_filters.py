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


@pytest.mark.parametrize(
    "url_name", ["admin:ledger_app_charge_changelist", "admin:ledger_app_refund_changelist"]
)
def test_a_currency_newer_than_the_cached_choices_is_still_filtered(admin_client, url_name):
    """The currencies are cached for ten minutes; a link to a currency the cache has not
    seen yet (the dashboard's, the morning the first yen arrives) still filters by it."""
    from django.core.cache import cache

    from ledger_app.services.refunds import create_refund
    from tests.factories import ChargeFactory

    cache.set("admin:charge-currencies", [], 600)  # cached before any charge existed
    for currency in ("usd", "jpy"):
        charge = ChargeFactory(amount=1_000, currency=currency)
        create_refund(charge_id=charge.pk, amount=100)

    response = admin_client.get(reverse(url_name), {"currency": "jpy"})

    assert response.status_code == 200
    shown = list(response.context["cl"].result_list)
    assert len(shown) == 1 and {row.currency for row in shown} == {"jpy"}
