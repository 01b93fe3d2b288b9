"""The admin shows the ledger read-only: nothing is added, changed or deleted by hand."""

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from ledger_app.models import IdempotencyRecord, LedgerEntry

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["charge", "refund", "idempotencyrecord", "ledgerentry"])
def test_changelists_show_the_data(admin_client, charge_with_a_refund, model):
    response = admin_client.get(reverse(f"admin:ledger_app_{model}_changelist"))

    assert response.status_code == 200
    charge, refund = charge_with_a_refund
    expected = {
        "charge": charge.id,
        "refund": refund.id,
        "idempotencyrecord": "k-admin",
        "ledgerentry": charge.id,
    }[model]
    assert expected.encode() in response.content


def test_money_is_formatted_for_its_currency(admin_client, charge_with_a_refund):
    response = admin_client.get(reverse("admin:ledger_app_charge_changelist"))

    assert b"$100.00" in response.content  # amount
    assert b"$12.34" in response.content  # refunded
    assert b"$87.66" in response.content  # refundable


@pytest.mark.parametrize("model", ["charge", "refund", "idempotencyrecord", "ledgerentry"])
def test_nothing_can_be_added_by_hand(admin_client, model):
    response = admin_client.get(reverse(f"admin:ledger_app_{model}_add"))

    assert response.status_code == 403


def test_refund_page_is_read_only_and_cannot_be_deleted(admin_client, charge_with_a_refund):
    _, refund = charge_with_a_refund
    change_url = reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])
    delete_url = reverse("admin:ledger_app_refund_delete", args=[quote(refund.pk)])

    page = admin_client.get(change_url)
    posted = admin_client.post(change_url, {"amount": 1})
    deleted = admin_client.post(delete_url, {"post": "yes"})

    assert page.status_code == 200
    assert b'name="amount"' not in page.content
    assert posted.status_code == 403
    assert deleted.status_code == 403
    assert LedgerEntry.objects.filter(refund=refund).exists()
    assert IdempotencyRecord.objects.filter(key="k-admin").exists()


def test_the_simulated_providers_records_are_visible_read_only(admin_client, charge_with_a_refund):
    _, refund = charge_with_a_refund
    url = reverse("admin:simulated_provider_providerrefund_changelist")

    response = admin_client.get(url)
    add = admin_client.get(reverse("admin:simulated_provider_providerrefund_add"))

    assert response.status_code == 200
    assert refund.provider_idempotency_key.encode() in response.content
    assert add.status_code == 403
