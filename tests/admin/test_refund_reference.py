"""A refund's page shows the card network's reference (ARN) for support staff to read out
to a customer whose bank traces the refund, or that it is still to come."""

from __future__ import annotations

import csv
import re

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

ARN = "74987654321012345678901"
LABEL = "Card network reference (ARN)"


def shown_reference(client, refund: Refund) -> str:
    """The text the refund's page shows beside the label."""
    page = client.get(reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)]))
    assert page.status_code == 200
    found = re.search(
        rf"<label>{re.escape(LABEL)}:</label>\s*<div class=\"readonly\">(.*?)</div>",
        page.content.decode(),
        re.S,
    )
    assert found, f"no {LABEL!r} on the refund's page"
    return found[1].strip()


def refund_of(behaviour: str = "succeed") -> Refund:
    charge = ChargeFactory(metadata={"simulate_refund": behaviour})
    return create_refund(RefundRequest(charge_id=charge.id, amount=100)).item


def test_a_succeeded_refund_shows_its_arn(agent_client):
    refund = refund_of()
    Refund.objects.filter(pk=refund.pk).update(destination_reference=ARN)

    assert shown_reference(agent_client, refund) == ARN


def test_a_succeeded_refund_without_one_says_it_is_pending(agent_client):
    refund = refund_of()

    assert shown_reference(agent_client, refund) == "pending from the card network"


@pytest.mark.parametrize("behaviour", ["decline", "timeout"])
def test_a_refund_that_did_not_succeed_waits_for_none(agent_client, behaviour):
    refund = refund_of(behaviour)
    assert refund.status != Refund.Status.SUCCEEDED

    assert shown_reference(agent_client, refund) == "-"


def test_the_csv_export_has_it_as_stored(admin_client):
    refund = refund_of()
    Refund.objects.filter(pk=refund.pk).update(destination_reference=ARN)

    export = admin_client.get(reverse("admin:ledger_app_refund_changelist") + "export.csv")
    header, *rows = csv.reader(b"".join(export.streaming_content).decode().splitlines())

    row = next(row for row in rows if refund.pk in row)
    assert row[header.index("destination_reference")] == ARN
