"""A refund made at the provider that does not fit the ledger (more than is left, or
maybe a refund of ours still unanswered) is held on its charge, never applied in part:
refunds of the charge are refused with `charge_disagrees_with_provider`, verify_ledger
names it, and a lead applies it once the way is clear (ledger_app/mirror/adoption.py)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from ledger_app import errors
from ledger_app.approvals.services import approve_refund, reject_refund
from ledger_app.ledger.drift import find_ledger_drift
from ledger_app.mirror.adoption import apply_held
from ledger_app.models import Charge, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import LEADS_MIGRATION, migration_group
from tests.invariants import assert_ledger_invariants
from tests.provider_webhook import ADOPTED, arrive, provider_refund, tell
from tests.services.people import staff

pytestmark = pytest.mark.usefixtures("inline_dispatch", "provider_webhook_secret")


@pytest.fixture
def arrived(client, db) -> Charge:
    return arrive(client)


@pytest.mark.django_db
class TestARefundThatDoesNotFit:
    @pytest.fixture
    def held(self, client, arrived, django_user_model):
        """$80 of the $100 waits for a lead's approval; the provider then refunds $60."""
        agent = staff(django_user_model, "agent")
        RefundLimit.objects.create(user=agent, currency="usd", per_refund=1_000)
        waiting = create_refund(RefundRequest(charge_id=arrived.pk, amount=8_000, actor=agent))
        assert waiting.item.status == "awaiting_approval"
        outcome = tell(client, "refund.created", provider_refund(), event_id="evt_r1")
        return waiting.item, outcome

    @pytest.mark.allows_drift("disagrees_with_provider")
    def test_it_is_held_and_blocks_the_charge_without_a_partial_write(self, held, arrived):
        waiting, outcome = held

        assert outcome.startswith(f"charge {arrived.pk} disagrees with the provider:")
        arrived.refresh_from_db()
        assert arrived.amount_refunded == 8_000 and Refund.objects.count() == 1
        assert [item["id"] for item in arrived.provider_disagreement["held"]] == [
            "re_3MadeInTheDashboard"
        ]
        with pytest.raises(errors.ChargeDisagreesWithProvider):
            create_refund(RefundRequest(charge_id=arrived.pk, amount=100))
        drift = [d.problem for d in find_ledger_drift()]
        assert drift == ["disagrees_with_provider"]
        out = io.StringIO()
        with pytest.raises(CommandError):
            call_command("verify_ledger", stdout=out)
        assert "re_3MadeInTheDashboard (6000)" in out.getvalue()

    @pytest.mark.allows_drift("disagrees_with_provider")
    def test_it_waits_on_the_admin_index_and_in_the_charge_list(self, held, viewer_client):
        page = viewer_client.get("/admin/").content.decode()

        listed = "/admin/ledger_app/charge/?provider=disagrees"
        assert re.search(
            rf'<a href="{re.escape(listed)}">Charges disagreeing with the provider</a>: '
            r"<strong[^>]*>1<",
            page,
        )
        assert "ch_3MadeAtTheProvider" in viewer_client.get(listed).content.decode()

    def test_once_ours_is_rejected_a_lead_applies_it(self, held, arrived, django_user_model):
        waiting, _ = held
        lead = staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))
        reject_refund(refund_id=waiting.pk, approver=lead, note="refunded at the provider")

        outcomes = apply_held(arrived.pk, actor="user:lead")

        adopted = Refund.objects.get(source="provider")
        assert outcomes == [ADOPTED.format(adopted.pk)]
        arrived.refresh_from_db()
        assert arrived.provider_disagreement is None and arrived.amount_refunded == 6_000
        assert_ledger_invariants()

    @pytest.mark.allows_drift("disagrees_with_provider")
    def test_applied_while_still_in_the_way_it_is_held_again(self, held, arrived):
        outcomes = apply_held(arrived.pk, actor="user:lead")

        assert "disagrees" in outcomes[0]
        arrived.refresh_from_db()
        assert arrived.provider_disagreement and arrived.amount_refunded == 8_000


@pytest.mark.django_db
class TestALeadResolvesItFromTheCommandLine:
    def test_held_it_exits_1_and_once_it_fits_exits_0(self, client, arrived, django_user_model):
        agent = staff(django_user_model, "agent")
        RefundLimit.objects.create(user=agent, currency="usd", per_refund=1_000)
        waiting = create_refund(RefundRequest(charge_id=arrived.pk, amount=8_000, actor=agent))
        tell(client, "refund.created", provider_refund(), event_id="evt_r1")
        out = io.StringIO()

        with pytest.raises(CommandError) as still:
            call_command("apply_provider_refunds", arrived.pk, stdout=out)

        assert still.value.returncode == 1 and "disagrees" in out.getvalue()
        lead = staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))
        reject_refund(refund_id=waiting.item.pk, approver=lead, note="refunded at the provider")
        call_command("apply_provider_refunds", arrived.pk, stdout=out)
        assert out.getvalue().endswith(f"charge {arrived.pk} agrees with the provider\n")
        assert Charge.objects.get(pk=arrived.pk).amount_refunded == 6_000


@pytest.mark.django_db
class TestAnImportsRefundsAreNotCountedTwice:
    """import_charges records what the provider had refunded as one refund without the
    provider's id; the provider then tells of its refund (a sync over that history, an
    event carrying its card reference)."""

    @pytest.fixture
    def imported(self, tmp_path) -> Charge:
        path = tmp_path / "charges.csv"
        path.write_text(
            "id,amount,currency,status,amount_refunded\n"
            "ch_3MadeAtTheProvider,10000,usd,succeeded,6000\n"
        )
        call_command("import_charges", str(path), stdout=io.StringIO())
        return Charge.objects.get(pk="ch_3MadeAtTheProvider")

    def test_the_same_amount_is_that_refund_and_takes_the_providers_id(self, client, imported):
        outcome = tell(client, "refund.updated", provider_refund(), event_id="evt_r1")

        recorded = Refund.objects.get()
        assert outcome == f"refund re_3MadeInTheDashboard is {recorded.pk}, recorded by the import"
        assert recorded.provider_refund_id == "re_3MadeInTheDashboard"
        imported.refresh_from_db()
        assert imported.amount_refunded == 6_000 and imported.provider_disagreement is None
        assert_ledger_invariants()

    @pytest.mark.allows_drift("disagrees_with_provider")
    def test_another_amount_is_held_not_added(self, client, imported):
        tell(client, "refund.created", provider_refund(amount=1_000), event_id="evt_r1")

        imported.refresh_from_db()
        assert imported.amount_refunded == 6_000 and Refund.objects.count() == 1
        assert "without the provider's ids" in imported.provider_disagreement["why"]


@pytest.mark.django_db
def test_an_approval_waits_while_the_charge_disagrees(client, arrived, django_user_model):
    """The money an approval would send may be what the provider already gave back."""
    agent = staff(django_user_model, "agent")
    RefundLimit.objects.create(user=agent, currency="usd", per_refund=1_000)
    waiting = create_refund(RefundRequest(charge_id=arrived.pk, amount=8_000, actor=agent)).item
    tell(client, "refund.created", provider_refund(), event_id="evt_r1")
    lead = staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))

    with pytest.raises(errors.ChargeDisagreesWithProvider):
        approve_refund(refund_id=waiting.pk, approver=lead)

    assert Refund.objects.get(pk=waiting.pk).status == "awaiting_approval"
    reject_refund(refund_id=waiting.pk, approver=lead, note="refunded at the provider")
    assert apply_held(arrived.pk, actor="user:lead")[0] == ADOPTED.format(
        Refund.objects.get(source="provider").pk
    )
