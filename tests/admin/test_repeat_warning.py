"""The admin warns before refunding a charge the same amount again within the repeat
window, tells money apart in its results, and its help texts and labels tell the truth."""

import pytest
from django.urls import reverse

from ledger_app.admin.charges import ChargeAdmin
from ledger_app.admin.forms import OTHER, REASONS, RefundForm
from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.admin.refund_form_pages import hidden, open_form, submit
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("ledger_invariants")]


def bulk(client, charges, **extra):
    return client.post(
        reverse("admin:ledger_app_charge_changelist"),
        {"action": "refund_in_full", "_selected_action": [c.pk for c in charges], **extra},
    )


class TestSingleForm:
    def test_no_warning_without_a_recent_refund_of_that_amount(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=1_000, actor="colleague"))

        page = open_form(agent_client, charge)
        assert b"repeat-warning" not in page.content and b"refund_again" not in page.content
        assert submit(agent_client, charge, amount="15.00").status_code == 302
        assert Refund.objects.count() == 2

    def test_same_amount_is_refused_with_a_warning_then_refunded_with_the_tick(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        earlier = create_refund(
            RefundRequest(charge_id=charge.pk, amount=1_500, actor="colleague")
        ).item
        page = open_form(agent_client, charge)
        key, state = hidden(page, "idempotency_key"), hidden(page, "charge_state")

        warned = submit(agent_client, charge, key, state, amount="15.00")

        text = warned.content.decode()
        assert warned.status_code == 200
        assert "repeat_of_earlier" in text and earlier.pk in text and "colleague" in text
        assert 'id="repeat-warning"' in text and 'aria-describedby="repeat-warning"' in text
        assert "Refund again anyway" in text
        assert Refund.objects.count() == 1
        # The same form (same key), ticked, refunds once; submitted twice it stays one.
        for _ in range(2):
            done = submit(agent_client, charge, key, state, amount="15.00", refund_again="on")
            assert done.status_code == 302
        assert Refund.objects.count() == 2
        assert Charge.objects.get().amount_refunded == 3_000

    def test_refund_everything_left_compares_with_what_is_left(self, agent_client):
        charge = ChargeFactory(amount=3_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=1_500, actor="colleague"))

        warned = submit(agent_client, charge, refund_all="1500")

        assert warned.status_code == 200 and b"repeat_of_earlier" in warned.content
        assert Refund.objects.count() == 1


class TestBulk:
    def test_confirmation_counts_recent_refunds_and_skips_repeats(self, agent_client):
        repeat = ChargeFactory(amount=3_000)
        create_refund(RefundRequest(charge_id=repeat.pk, amount=1_500, actor="colleague"))
        fresh = ChargeFactory(amount=1_000)
        page = bulk(agent_client, [repeat, fresh])

        text = page.content.decode()
        assert "1 of these charges was refunded in the last 7 days" in text
        assert "Refund them again anyway" in text and Refund.objects.count() == 1
        confirm = {
            "post": "yes",
            "batch_key": hidden(page, "batch_key"),
            "confirmed": hidden(page, "confirmed"),
            "reason": "duplicate",
            "note": "Event cancelled",
        }
        done = bulk(agent_client, [repeat, fresh], **confirm)
        said = [str(m) for m in done.wsgi_request._messages]
        assert any("repeat of an earlier refund" in m and repeat.pk in m for m in said)
        assert Refund.objects.count() == 2
        again = bulk(agent_client, [repeat, fresh], **confirm, refund_again="on")
        assert again.status_code == 302 and Refund.objects.count() == 3

    def test_no_count_without_recent_refunds(self, agent_client):
        page = bulk(agent_client, [ChargeFactory()])
        assert b"recently-refunded" not in page.content and b"refund_again" not in page.content

    def test_results_total_awaiting_approval_apart_from_refunded(self, agent_client, support_agent):
        from ledger_app.models import RefundLimit

        RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=2_000)
        small, big = ChargeFactory(amount=1_000), ChargeFactory(amount=7_000)
        page = bulk(agent_client, [small, big])
        done = bulk(
            agent_client,
            [small, big],
            post="yes",
            batch_key=hidden(page, "batch_key"),
            confirmed=hidden(page, "confirmed"),
            reason="duplicate",
            note="n",
        )
        said = [str(m) for m in done.wsgi_request._messages]
        totals = next(m for m in said if m.startswith("Totals:"))
        assert "refunded $10.00" in totals
        assert "awaiting approval (reserved, not refunded) $70.00" in totals
        assert "$80.00" not in totals


class TestWords:
    def test_reasons_read_as_the_model_labels(self):
        assert {v: label for v, label in REASONS if v != OTHER} == dict(Refund.Reason.choices)

    @pytest.mark.parametrize(
        ("amount", "refunded", "asked", "needs"),
        [(3_000, 0, 3_000, True), (3_000, 0, 1_000, False), (3_000, 1_000, 2_000, False)],
    )
    def test_the_note_help_states_the_rule(self, amount, refunded, asked, needs):
        charge = ChargeFactory(amount=amount)
        if refunded:
            create_refund(RefundRequest(charge_id=charge.pk, amount=refunded))
            charge.refresh_from_db()
        form = RefundForm(
            {
                "amount": "",
                "refund_all": str(asked),
                "reason": "duplicate",
                "note": "",
                "idempotency_key": "admin:" + "0" * 32,
                "charge_state": "0",
            },
            charge=charge,
        )
        assert "whole charge amount (nothing refunded before)" in form.fields["note"].help_text
        form.is_valid()
        assert ("note_required" in str(form.errors.get("note", ""))) is needs

    def test_charge_search_help_says_what_matches_partly(self, agent_client):
        charge = ChargeFactory(customer="cus_12345", description="Concert tickets")
        url = reverse("admin:ledger_app_charge_changelist")
        help_text = ChargeAdmin.search_help_text
        assert "exactly" in help_text and "partly: description" in help_text
        assert charge.pk in agent_client.get(url, {"q": "cert tick"}).content.decode()
        assert charge.pk not in agent_client.get(url, {"q": "cus_123"}).content.decode()
        assert charge.pk not in agent_client.get(url, {"q": charge.pk[:-2]}).content.decode()
