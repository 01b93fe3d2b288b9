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

    from ledger_app.refunds.services import RefundRequest, create_refund
    from tests.factories import ChargeFactory

    cache.set("admin:charge-currencies", [], 600)  # cached before any charge existed
    for currency in ("usd", "jpy"):
        charge = ChargeFactory(amount=1_000, currency=currency)
        create_refund(RefundRequest(charge_id=charge.pk, amount=100))

    response = admin_client.get(reverse(url_name), {"currency": "jpy"})

    assert response.status_code == 200
    shown = list(response.context["cl"].result_list)
    assert len(shown) == 1 and {row.currency for row in shown} == {"jpy"}


@pytest.mark.parametrize(
    "url_name",
    ["admin:ledger_app_refund_changelist", "admin:ledger_app_refundattention_changelist"],
)
def test_the_reason_filter_offers_no_reason_and_lists_exactly_those_refunds(admin_client, url_name):
    """Refunds made without a reason are stored with "": the filter names them "No reason"
    (the home page's chart links there), shows it chosen, and lists only them."""
    from ledger_app.refunds.services import RefundRequest, create_refund
    from tests.factories import ChargeFactory

    made = {}
    for reason in ("duplicate", None):
        # declined: failed and not handled, so the attention queue lists them too
        charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "decline"})
        made[reason] = create_refund(
            RefundRequest(charge_id=charge.pk, amount=100, reason=reason)
        ).item

    response = admin_client.get(reverse(url_name), {"reason__exact": "", "_facets": "1"})

    assert response.status_code == 200
    assert [row.pk for row in response.context["cl"].result_list] == [made[None].pk]
    reason_filter = next(
        spec for spec in response.context["cl"].filter_specs if spec.title == "reason"
    )
    choices = list(reason_filter.choices(response.context["cl"]))
    assert [c["display"] for c in choices if c["selected"]] == ["No reason (1)"]
    everything = admin_client.get(reverse(url_name))
    assert len(everything.context["cl"].result_list) == 2
