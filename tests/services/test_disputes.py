"""Disputes: the provider's charge.dispute.* webhooks (signed, through POST
/webhooks/stripe) keep the dispute on its charge, and while it is open no path refunds the
charge (refunding it would give the money back twice). The simulated provider opens and
closes disputes, and sends all its news, through that same signed door over HTTP."""

import json
import time
import urllib.error
import urllib.request

import pytest
from django.core.management import call_command
from django.db.models import QuerySet
from django.test import Client

from ledger_app import errors
from ledger_app.access.api_keys import create_api_key
from ledger_app.approvals.services import approve_refund, reject_refund
from ledger_app.charges.selectors import charges_for_update
from ledger_app.events.delivery import signature_header
from ledger_app.mirror import events_in as provider_events
from ledger_app.models import Charge, Event, LedgerEntry, ProviderEvent, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import news
from tests.commands.bulk_runs import bulk, write_csv
from tests.factories import LEADS_MIGRATION, ChargeFactory, migration_group
from tests.provider_webhook import SECRET, event_of, post_event
from tests.services.people import staff

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")
FORM = "application/x-www-form-urlencoded"


def dispute(of: Charge, status: str = "needs_response", **changes) -> dict:
    return {
        "id": "dp_test_1",
        "object": "dispute",
        "charge": of.provider_reference,
        "amount": of.amount,
        "currency": of.currency,
        "status": status,
        "reason": "fraudulent",
        **changes,
    }


@pytest.fixture
def signed_door(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET


@pytest.mark.django_db
class TestInboundDisputes:
    def test_an_open_dispute_stops_every_refund_path_until_it_closes(
        self, client, signed_door, tmp_path
    ):
        charge = ChargeFactory(amount=5_000)
        answer = post_event(client, event_of("evt_d1", "charge.dispute.created", dispute(charge)))

        assert answer.status_code == 200, answer.content
        charge.refresh_from_db()
        assert (charge.dispute_id, charge.dispute_status) == ("dp_test_1", "needs_response")
        assert charge.refund_blocker == "charge_disputed"
        updated = Event.objects.get(type="charge.updated")
        assert updated.data_object["disputed"] is True
        assert updated.previous_attributes == {"disputed": False}

        with pytest.raises(errors.ChargeDisputed):
            create_refund(RefundRequest(charge_id=charge.id, amount=100))
        api = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_key(name='c')[1]}")
        refused = api.post("/v1/refunds", f"charge={charge.id}&amount=100", content_type=FORM)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "charge_disputed"
        path = tmp_path / "refunds.csv"
        write_csv(path, [(charge.id, "100", "", "")])
        code, out, err = bulk(path, "--batch-id", "disputed-1")
        assert code != 0 and "charge_disputed" in out + err
        assert not Refund.objects.exists()

        post_event(client, event_of("evt_d2", "charge.dispute.closed", dispute(charge, "won")))
        charge.refresh_from_db()
        assert charge.dispute_status == "won" and charge.refund_blocker is None
        assert (
            create_refund(RefundRequest(charge_id=charge.id, amount=100)).item.status == "succeeded"
        )
        assert Event.objects.filter(type="charge.updated").count() == 1  # only the first word

    def test_a_refund_waiting_for_approval_is_not_approved_while_disputed(
        self, client, signed_door, django_user_model
    ):
        key, secret = create_api_key(name="limited")
        RefundLimit.objects.create(api_key=key, currency="usd", per_refund=10, per_day=10)
        charge = ChargeFactory(amount=5_000)
        api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
        waiting = api.post("/v1/refunds", f"charge={charge.id}&amount=500", content_type=FORM)
        assert waiting.json()["ledger_status"] == "awaiting_approval"
        post_event(client, event_of("evt_d1", "charge.dispute.created", dispute(charge)))
        lead = staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))

        with pytest.raises(errors.ChargeDisputed):
            approve_refund(refund_id=waiting.json()["id"], approver=lead)
        assert Refund.objects.get().status == "awaiting_approval"
        reject_refund(refund_id=waiting.json()["id"], approver=lead, note="disputed")
        assert Charge.objects.get(pk=charge.pk).amount_refunded == 0

    @pytest.mark.parametrize(
        ("changes", "said"),
        [
            ({"currency": "eur"}, "does not fit"),
            ({"amount": 5_001}, "does not fit"),
            ({"amount": "5000"}, "does not fit"),
            ({"status": "open"}, "is not one"),
            ({"charge": "ch_nobody"}, "unknown charge"),
            ({"charge": "ch_\x00"}, "is not an id"),
            ({"id": "dp x"}, "is not an id"),
        ],
    )
    def test_a_dispute_that_is_not_the_charges_changes_nothing(
        self, client, signed_door, changes, said, monkeypatch
    ):
        charge = ChargeFactory(amount=5_000)
        locks = []  # nothing that does not fit waits for the charge's lock

        def counted_lock() -> QuerySet[Charge]:
            locks.append(1)
            return charges_for_update()

        monkeypatch.setattr(provider_events, "charges_for_update", counted_lock)

        answer = post_event(
            client, event_of("evt_d9", "charge.dispute.created", dispute(charge, **changes))
        )

        assert answer.status_code == 200
        assert said in ProviderEvent.objects.get(pk="evt_d9").outcome
        charge.refresh_from_db()
        assert (charge.dispute_id, charge.dispute_status) == ("", "")
        assert not Event.objects.filter(type="charge.updated").exists()
        assert locks == []

    def test_a_second_dispute_of_a_disputed_charge_is_ignored(self, client, signed_door):
        charge = ChargeFactory(amount=5_000)
        post_event(client, event_of("evt_d1", "charge.dispute.created", dispute(charge)))

        post_event(
            client,
            event_of("evt_d2", "charge.dispute.closed", dispute(charge, "lost", id="dp_other")),
        )

        charge.refresh_from_db()
        assert (charge.dispute_id, charge.dispute_status) == ("dp_test_1", "needs_response")


@pytest.mark.django_db(transaction=True)
class TestTheSimulatedProviderOverHttp:
    @pytest.fixture
    def door(self, live_server, settings):
        settings.STRIPE_WEBHOOK_SECRET = SECRET
        settings.SIMULATED_PROVIDER_WEBHOOK_URL = f"{live_server.url}/webhooks/stripe"

    def test_it_opens_and_closes_a_dispute(self, door, capsys):
        charge = ChargeFactory(amount=5_000)

        call_command("simulate_dispute", charge.id)
        opened = Charge.objects.get(pk=charge.pk)
        call_command("simulate_dispute", charge.id, "--status", "lost")
        closed = Charge.objects.get(pk=charge.pk)

        assert opened.dispute_status == "needs_response" and opened.dispute_id.startswith("dp_")
        assert (closed.dispute_id, closed.dispute_status) == (opened.dispute_id, "lost")
        types = list(ProviderEvent.objects.order_by("received_at").values_list("type", flat=True))
        # Its funds leave when it opens (with the provider's dispute fee), and stay gone.
        assert types == [
            "charge.dispute.created",
            "charge.dispute.funds_withdrawn",
            "charge.dispute.closed",
        ]
        assert "charge.dispute.closed" in capsys.readouterr().out
        moved = LedgerEntry.objects.filter(charge=charge, kind__startswith="dispute_")
        assert sorted(moved.values_list("kind", "amount")) == [
            ("dispute_fee", 1_500),
            ("dispute_withdrawn", 5_000),
        ]

    def test_advance_sends_its_news_signed_over_http(self, door):
        charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "pending_then_succeed"})
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=300)).item
        assert refund.status == "unknown"  # the provider said pending

        call_command("advance_simulated_provider")

        refund.refresh_from_db()
        assert refund.status == "succeeded"
        stored = ProviderEvent.objects.get()
        assert stored.type == "refund.updated" and "unknown -> succeeded" in stored.outcome

    def test_a_wrong_secret_is_refused_at_the_door(self, door, live_server):
        charge = ChargeFactory(amount=5_000)
        body = json.dumps(
            news.dispute_news(
                charge_reference=charge.provider_reference,
                amount=charge.amount,
                currency=charge.currency,
                status="needs_response",
            )[0]
        )
        request = urllib.request.Request(  # noqa: S310 - the test's own server
            f"{live_server.url}/webhooks/stripe",
            data=body.encode(),
            headers={
                "Content-Type": "application/json",
                "Stripe-Signature": signature_header(body, "whsec_wrong", int(time.time())),
            },
            method="POST",
        )

        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310

        assert refused.value.code == 400
        assert Charge.objects.get(pk=charge.pk).dispute_id == ""
