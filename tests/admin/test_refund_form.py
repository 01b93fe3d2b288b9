"""The admin refund form: exact amounts, one refund per rendered form, errors on the form."""

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.urls import reverse

from ledger_app.admin.bulk_refund import BULK_OUTCOMES, BulkOutcome
from ledger_app.admin.form_keys import new_form_key
from ledger_app.charges.selectors import charge_state
from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.admin.refund_form_pages import (
    drawn_form,
    form_key,
    hidden,
    open_form,
    refund_url,
    submit,
)
from tests.factories import ChargeFactory
from tests.invariants import books

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants"),
    pytest.mark.sqlite_pass,
]


class TestRefundForm:
    def test_page_shows_amount_refunded_and_what_is_left(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=1_234))

        page = open_form(agent_client, charge)

        assert page.status_code == 200
        text = page.content.decode()
        assert "$50.00" in text and "$12.34" in text and "$37.66" in text
        assert "Refund everything left ($37.66)" in text
        assert re.search(r'name="refund_all" value="3766"', text)
        assert re.search(r'name="idempotency_key" value="admin:[0-9a-f]{32}:[\w-]{43}"', text)

    def test_partial_refund_in_major_units_is_exact(self, agent_client, support_agent):
        charge = ChargeFactory(amount=5_000)

        response = submit(agent_client, charge, amount="12.34")

        assert response.status_code == 302
        refund = Refund.objects.get()
        assert (refund.amount, refund.status, refund.source) == (1_234, "succeeded", "admin")
        assert refund.created_by == support_agent and refund.actor == "user:agent"
        charge.refresh_from_db()
        assert charge.amount_refunded == 1_234

    def test_yen_and_dinar_amounts_use_their_own_exponent(self, agent_client):
        yen = ChargeFactory(amount=30_000, currency="jpy")
        dinar = ChargeFactory(amount=12_345, currency="kwd")

        submit(agent_client, yen, amount="1,500")
        submit(agent_client, dinar, amount="1.005")

        assert Refund.objects.get(charge=yen).amount == 1_500
        assert Refund.objects.get(charge=dinar).amount == 1_005

    def test_a_blank_amount_refunds_nothing(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=1_000))
        before = books(charge)

        response = submit(agent_client, charge, amount="")

        assert response.status_code == 200
        assert "amount_required" in response.content.decode()
        assert books(charge) == before

    def test_the_rest_is_refunded_only_by_ticking_the_box_that_names_it(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=1_000))
        page = open_form(agent_client, charge)

        response = submit(
            agent_client,
            charge,
            key=form_key(page),
            state=hidden(page, "charge_state"),
            refund_all=hidden(page, "refund_all"),
        )

        assert response.status_code == 302
        charge.refresh_from_db()
        assert charge.amount_refunded == 5_000
        last = Refund.objects.filter(charge=charge).order_by("created_at").last()
        assert last is not None and last.amount == 4_000

    def test_an_amount_and_the_box_together_are_refused(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        before = books(charge)

        response = submit(agent_client, charge, amount="1.00", refund_all="5000", note="n")

        assert "invalid_amount" in response.content.decode()
        assert books(charge) == before

    @pytest.mark.parametrize("typed", ["12.345", "1e3", "-5", "abc", "0", "0.001"])
    def test_bad_amounts_are_form_errors_and_input_is_kept(self, agent_client, typed):
        charge = ChargeFactory(amount=5_000)
        before = books(charge)

        response = submit(agent_client, charge, amount=typed, note="kept note")

        assert response.status_code == 200
        assert "invalid_amount" in response.content.decode()
        assert f'value="{typed}"' in response.content.decode()
        assert "kept note" in response.content.decode()
        assert books(charge) == before

    def test_over_the_balance_shows_the_code_and_what_is_left(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=4_000))
        before = books(charge)

        response = submit(agent_client, charge, amount="20.00")

        text = response.content.decode()
        assert response.status_code == 200
        assert "amount_too_large" in text
        assert "Refund amount ($20.00) is more than what is left to refund" in text
        assert "($10.00)" in text
        assert 'value="20.00"' in text
        assert books(charge) == before

    def test_fully_refunded_charge_is_refused_on_the_form(
        self, agent_client, fully_refunded_charge
    ):
        before = books(fully_refunded_charge)

        page = open_form(agent_client, fully_refunded_charge)
        response = submit(
            agent_client,
            fully_refunded_charge,
            key=new_form_key(),
            state=charge_state(fully_refunded_charge.pk),
            amount="1.00",
        )

        assert b'id="refund-form"' not in page.content
        assert "Nothing is left to refund on this charge." in page.content.decode()
        assert "charge_already_refunded" in response.content.decode()
        assert books(fully_refunded_charge) == before

    def test_submitting_one_rendered_form_twice_refunds_once(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        key, state = drawn_form(agent_client, charge)

        first = submit(agent_client, charge, key=key, state=state, amount="10.00")
        second = submit(agent_client, charge, key=key, state=state, amount="10.00")

        assert first.status_code == second.status_code == 302
        assert Refund.objects.count() == 1
        charge.refresh_from_db()
        assert charge.amount_refunded == 1_000
        page = agent_client.get(second.url)
        assert "Already submitted" in page.content.decode()

    def test_an_invalid_resubmission_of_a_used_form_shows_what_it_made(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        key, state = drawn_form(agent_client, charge)
        submit(agent_client, charge, key=key, state=state, amount="1.50")

        again = submit(agent_client, charge, key=key, state=state, amount="")  # Back, reload

        assert "This refund form was already used" in again.content.decode()
        assert b'id="refund-form"' not in again.content
        assert Refund.objects.count() == 1

    def test_a_form_drawn_again_with_errors_carries_the_charge_as_shown(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        key, state = drawn_form(agent_client, charge)
        create_refund(RefundRequest(charge_id=charge.pk, amount=100))  # elsewhere, meanwhile

        redrawn = submit(agent_client, charge, key=key, state=state)

        assert "amount_required" in redrawn.content.decode()
        assert hidden(redrawn, "charge_state") == str(charge_state(charge.pk))
        assert "Refund everything left ($49.00)" in redrawn.content.decode()

    def test_a_refused_submission_binds_nothing_so_the_corrected_one_works(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        key, state = drawn_form(agent_client, charge)

        submit(agent_client, charge, key=key, state=state, amount="60.00")
        submit(agent_client, charge, key=key, state=state, amount="40.00")

        assert list(Refund.objects.values_list("amount", flat=True)) == [4_000]

    def test_other_reason_and_full_refunds_need_a_note(self, agent_client):
        charge = ChargeFactory(amount=5_000)

        other = submit(agent_client, charge, amount="1.00", reason="other")
        full = submit(agent_client, charge, amount="50.00")
        with_note = submit(agent_client, charge, amount="50.00", note="Order cancelled")

        assert "Explain the refund" in other.content.decode()
        assert "needs a note" in full.content.decode()
        assert with_note.status_code == 302
        assert Refund.objects.get().note == "Order cancelled"

    def test_field_errors_carry_their_stable_code(self):
        from ledger_app.admin.forms import RefundForm

        charge = ChargeFactory(amount=1_000)
        form = RefundForm(
            {
                "amount": "1" * 41,
                "reason": "nope",
                "note": "x" * 1_001,
                "idempotency_key": "k",
                "charge_state": "0",
            },
            charge=charge,
        )

        assert not form.is_valid()
        assert form.has_error("amount", "invalid_amount")
        assert form.has_error("reason", "invalid_reason")
        assert form.has_error("note", "invalid_note")
        assert "(invalid_note)" in form.errors["note"][0]

    def test_each_admin_refund_is_written_to_the_charge_history(self, agent_client):
        charge = ChargeFactory(amount=5_000)

        submit(agent_client, charge, amount="2.50", reason="duplicate")

        entry = LogEntry.objects.get()
        refund = Refund.objects.get()
        assert entry.object_id == charge.pk
        # django-stubs declare LogEntry.user a ForeignKey to no model: a user of no type.
        assert entry.user.username == "agent"  # type: ignore[attr-defined]
        assert refund.id in entry.get_change_message() and "$2.50" in entry.get_change_message()
        page = agent_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))
        assert refund.id in page.content.decode()

    def test_html_in_a_note_is_shown_escaped(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        submit(agent_client, charge, amount="1.00", note="<script>alert(1)</script>")

        page = agent_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))

        assert b"<script>alert(1)</script>" not in page.content
        assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page.content

    def test_unknown_charge_is_404(self, agent_client):
        assert agent_client.get("/admin/ledger_app/charge/ch_nope/refund/").status_code == 404


class TestBulkRefund:
    def action(self, client, charges, **extra):
        return client.post(
            reverse("admin:ledger_app_charge_changelist"),
            {"action": "refund_in_full", "_selected_action": [c.pk for c in charges], **extra},
        )

    def test_confirmation_lists_charges_what_is_left_and_totals(self, agent_client):
        usd = [ChargeFactory(amount=1_000), ChargeFactory(amount=2_500)]
        yen = ChargeFactory(amount=3_000, currency="jpy")
        create_refund(RefundRequest(charge_id=usd[0].pk, amount=400))

        page = self.action(agent_client, [*usd, yen])

        text = page.content.decode()
        assert page.status_code == 200
        assert all(c.pk in text for c in [*usd, yen])
        assert "USD: $31.00" in text and "JPY: ¥3,000" in text
        assert Refund.objects.count() == 1

    def test_confirming_refunds_each_charge_once_even_when_confirmed_twice(self, agent_client):
        charges = [ChargeFactory(amount=1_000) for _ in range(3)]
        page = self.action(agent_client, charges)
        confirm = {
            "post": "yes",
            "batch_key": hidden(page, "batch_key"),
            "confirmed": hidden(page, "confirmed"),
            "reason": "duplicate",
            "note": "Event cancelled",
        }

        first = self.action(agent_client, charges, **confirm)
        second = self.action(agent_client, charges, **confirm)

        assert first.status_code == second.status_code == 302
        assert Refund.objects.count() == 3
        assert all(c.amount_refunded == 1_000 for c in Charge.objects.all())
        messages = [str(m) for m in second.wsgi_request._messages]
        assert any(
            m.startswith("Already refunded by this confirmation (replayed)") for m in messages
        )

    def test_result_says_per_charge_what_happened(self, agent_client, fully_refunded_charge):
        fresh = ChargeFactory(amount=1_000)
        page = self.action(agent_client, [fresh, fully_refunded_charge])

        done = self.action(
            agent_client,
            [fresh, fully_refunded_charge],
            post="yes",
            batch_key=hidden(page, "batch_key"),
            confirmed=hidden(page, "confirmed"),
            reason="duplicate",
            note="cleanup",
        )

        messages = [str(m) for m in done.wsgi_request._messages]
        assert any(m.startswith("Refunded:") and fresh.pk in m for m in messages)
        assert any(
            m.startswith("Not refunded, nothing to refund:")
            and f"{fully_refunded_charge.pk} (fully refunded)" in m
            for m in messages
        )

    def test_every_outcome_has_one_message_and_every_refund_status_is_an_outcome(self):
        assert [outcome for outcome, _level in BULK_OUTCOMES] == list(BulkOutcome)
        assert set(Refund.Status) <= set(BulkOutcome)


class TestPermissions:
    def test_staff_without_the_permission_see_no_button_and_no_action(self, viewer_client):
        charge = ChargeFactory(amount=1_000)

        page = viewer_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))
        listing = viewer_client.get(reverse("admin:ledger_app_charge_changelist"))

        assert page.status_code == listing.status_code == 200
        assert b"refund-link" not in page.content
        assert b"refund_in_full" not in listing.content

    def test_staff_without_the_permission_get_403_on_the_refund_urls(self, viewer_client):
        charge = ChargeFactory(amount=1_000)

        get = viewer_client.get(refund_url(charge))
        post = viewer_client.post(
            refund_url(charge),
            {"amount": "1.00", "reason": "duplicate", "idempotency_key": "admin:x"},
        )
        action = viewer_client.post(
            reverse("admin:ledger_app_charge_changelist"),
            {
                "action": "refund_in_full",
                "_selected_action": [charge.pk],
                "post": "yes",
                "batch_key": "admin-bulk:x",
                "reason": "duplicate",
                "note": "n",
            },
        )

        assert get.status_code == post.status_code == 403
        assert action.status_code in (200, 302)  # Django ignores an action one may not run
        assert Refund.objects.count() == 0

    def test_support_agents_see_the_button(self, agent_client):
        charge = ChargeFactory(amount=1_000)

        page = agent_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))

        assert b"refund-link" in page.content

    def test_csrf_is_enforced(self, support_agent):
        from django.test import Client

        client = Client(enforce_csrf_checks=True)
        client.force_login(support_agent)
        charge = ChargeFactory(amount=1_000)

        response = client.post(
            refund_url(charge),
            {"amount": "1.00", "reason": "duplicate", "idempotency_key": "admin:csrf"},
        )

        assert response.status_code == 403
        assert Refund.objects.count() == 0

    def test_anonymous_users_are_sent_to_log_in(self, client):
        charge = ChargeFactory(amount=1_000)

        response = client.get(refund_url(charge))

        assert response.status_code == 302 and "/admin/login/" in response.url


def test_create_support_agent_makes_a_staff_user_who_may_refund(capsys, client):
    """The new agent signs in with the printed password, adds the printed secret to an
    authenticator, and refunds only after entering the code it shows."""
    import re
    from base64 import b32decode

    from django.core.management import call_command
    from django_otp.oath import totp

    call_command("create_support_agent", "sam")

    out = capsys.readouterr().out
    password_found = re.search(r"Support agent: sam / (\S+)", out)
    secret_found = re.search(r"secret: +([A-Z2-7 ]+)", out)
    assert password_found and secret_found, out
    password = password_found.group(1)
    secret = b32decode(secret_found.group(1).replace(" ", ""))
    assert "otpauth://totp/" in out
    signed_in = client.post(
        reverse("admin:login"), {"username": "sam", "password": password, "next": "/admin/"}
    )
    assert signed_in.status_code == 302 and signed_in.url == "/admin/"
    charge = ChargeFactory(amount=1_000)
    asked = client.get(refund_url(charge), follow=True)
    assert asked.redirect_chain[-1][0].startswith(reverse("verify-second-factor"))
    assert b"Enter your code" in asked.content
    code = f"{totp(secret):06d}"
    done = client.post(asked.redirect_chain[-1][0], {"code": code}, follow=True)
    assert done.status_code == 200 and b'name="amount"' in done.content
