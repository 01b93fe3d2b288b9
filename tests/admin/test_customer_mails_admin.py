"""A refund's customer mails in the admin: its page lists every mail with what became of it
(bounced, refused, may not have gone: said plainly), the address changes and where mails go
now; "Resend last mail…" and "Change mail address…" act through their services for those
who may refund, with a fresh code, in the admin log, and refuse everyone else."""

from __future__ import annotations

import re
from datetime import timedelta
from itertools import count

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from ledger_app.customer_mail.models import CustomerMail, MailAddressChange, MailKind, MailStatus
from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.second_factor import device_of, verified

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

ADDRESS = "ana@example.com"
_ids = count(1)


@pytest.fixture
def refund(charge_with_a_refund) -> Refund:
    """The $12.34 refund, its mails going to ADDRESS."""
    _, made = charge_with_a_refund
    Refund.objects.filter(pk=made.pk).update(customer_email=ADDRESS)
    made.refresh_from_db()
    return made


def mail(refund: Refund, kind: MailKind, status: MailStatus, **fields) -> CustomerMail:
    """A mail row as the sender leaves it, written minutes_ago (default: now)."""
    minutes_ago = fields.pop("minutes_ago", 0)
    return CustomerMail.objects.create(
        refund=refund,
        kind=kind,
        to=fields.pop("to", ADDRESS),
        language="en",
        details={},
        message_id=f"<x{next(_ids)}@example.com>",
        status=status,
        created_at=timezone.now() - timedelta(minutes=minutes_ago),
        **fields,
    )


def page_url(refund: Refund) -> str:
    return reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])


def resend_url(refund: Refund) -> str:
    return reverse("admin:ledger_app_refund_resend_mail", args=[quote(refund.pk)])


def address_url(refund: Refund) -> str:
    return reverse("admin:ledger_app_refund_mail_address", args=[quote(refund.pk)])


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def table_rows(page: str, css_class: str) -> list[str]:
    """The text of each data row of the page's table in the div of `css_class`."""
    found = re.search(rf'<div class="history-table {css_class}"[^>]*>(.*?)</table>', page, re.S)
    assert found, f"no {css_class} table on the page"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)
    return [text_of(row) for row in rows[1:]]  # the first is the head


def told(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def mail_log(refund: Refund) -> list[str]:
    return list(
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Refund),
            object_id=refund.pk,
            action_flag=CHANGE,
        ).values_list("change_message", flat=True)
    )


def state(refund: Refund) -> tuple:
    """Everything these pages may change."""
    return (
        Refund.objects.get(pk=refund.pk).customer_email,
        sorted(CustomerMail.objects.values_list("pk", "to", "status", "resend_of")),
        list(MailAddressChange.objects.values_list("pk")),
        LogEntry.objects.count(),
    )


class TestTheRefundPage:
    def test_lists_every_mail_newest_first_with_status_and_outcome(self, agent_client, refund):
        made = mail(
            refund, MailKind.MADE, MailStatus.SENT, minutes_ago=50, attempts=1,
            sent_at=timezone.now(), outcome="250 2.0.0 Ok: queued as 4F2",
        )  # fmt: skip
        mail(
            refund, MailKind.SUCCEEDED, MailStatus.BOUNCED, minutes_ago=40, attempts=1,
            outcome="bounced: 550 5.1.1 mailbox unavailable",
        )  # fmt: skip
        mail(
            refund, MailKind.FAILED, MailStatus.REFUSED, minutes_ago=30, attempts=5,
            outcome="gave up after 5 tries; last: 451 4.7.1 try later",
        )  # fmt: skip
        mail(
            refund, MailKind.REFERENCE, MailStatus.UNKNOWN, minutes_ago=20, attempts=1,
            outcome="the sender stopped while the SMTP server had it",
        )  # fmt: skip
        mail(
            refund, MailKind.MADE, MailStatus.PENDING, minutes_ago=10, resend_of=made,
            requested_by="user:lead", to="new@example.com",
        )  # fmt: skip

        page = agent_client.get(page_url(refund)).content.decode()
        rows = table_rows(page, "customer-mails")

        assert len(rows) == 5
        resend, unknown, refused, bounced, sent = rows
        assert "Refund made new@example.com Waiting to be sent 0" in resend
        assert resend.endswith("resent by user:lead")
        assert "Trace number" in unknown and "May not have been sent 1" in unknown
        assert "it is not sent again by itself — the sender stopped while" in unknown
        assert "Refund failed" in refused and "Refused 5" in refused
        assert (
            "Not delivered: the SMTP server refused it, or it gave up after its retries — "
            "gave up after 5 tries; last: 451 4.7.1 try later" in refused
        )
        assert "Refund succeeded" in bounced and "Bounced 1" in bounced
        assert "Not delivered: it came back — bounced: 550 5.1.1 mailbox unavailable" in bounced
        assert "Refund made ana@example.com Sent 1" in sent
        assert "250 2.0.0 Ok: queued as 4F2" in sent and "Not delivered" not in sent
        assert not any("resent by" in row for row in (unknown, refused, bounced, sent))
        assert ADDRESS in text_of(page.split('class="history-table customer-mails"')[0])
        assert "Resend last mail…" in page and "Change mail address…" in page

    def test_escapes_what_the_smtp_server_said(self, agent_client, refund):
        mail(refund, MailKind.MADE, MailStatus.REFUSED, outcome="<script>alert(1)</script>")

        page = agent_client.get(page_url(refund)).content.decode()

        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page

    def test_a_refund_without_an_address_or_mails_says_so_and_offers_no_resend(
        self, agent_client, charge_with_a_refund
    ):
        _, refund = charge_with_a_refund
        assert refund.customer_email == ""

        page = agent_client.get(page_url(refund)).content.decode()

        assert "no address: no mails are sent" in page
        assert "None written" in text_of(page)
        assert "Resend last mail…" not in page and resend_url(refund) not in page
        assert "Change mail address…" in page

    def test_shows_the_address_changes(self, agent_client, refund):
        MailAddressChange.objects.create(
            refund=refund,
            old_address="",
            new_address=ADDRESS,
            note="customer phoned, checked the order",
            changed_by="user:agent",
        )

        page = agent_client.get(page_url(refund)).content.decode()

        [row] = table_rows(page, "mail-address-changes")
        assert row.endswith("(none) ana@example.com user:agent customer phoned, checked the order")


class TestResendLastMail:
    def test_confirmed_it_writes_one_resend_and_logs_it(self, agent_client, support_agent, refund):
        original = mail(refund, MailKind.SUCCEEDED, MailStatus.BOUNCED, outcome="bounced: 550")
        before = set(CustomerMail.objects.values_list("pk", flat=True))

        asked = agent_client.get(resend_url(refund))
        shown_only = set(CustomerMail.objects.values_list("pk", flat=True))
        done = agent_client.post(resend_url(refund), {"post": "yes"})

        assert asked.status_code == 200
        assert "Yes, resend it" in asked.content.decode() and ADDRESS in asked.content.decode()
        assert shown_only == before
        assert done.status_code == 302 and done["Location"] == page_url(refund)
        [resent] = CustomerMail.objects.exclude(pk__in=before)
        assert resent.resend_of == original
        assert resent.requested_by == "user:agent"
        assert (resent.status, resent.kind, resent.to) == (
            MailStatus.PENDING,
            MailKind.SUCCEEDED,
            ADDRESS,
        )
        assert resent.message_id != original.message_id
        assert mail_log(refund) == [
            f"Resent the last customer mail (Refund succeeded) to {ADDRESS}"
        ]
        assert LogEntry.objects.get(object_id=refund.pk).user == support_agent
        assert told(done) == [
            f"Resent the last customer mail (Refund succeeded) to {ADDRESS}: it is waiting "
            "to be sent (by user:agent)."
        ]

    def test_without_a_fresh_code_the_write_gate_refuses_and_nothing_is_written(
        self, support_agent, refund
    ):
        mail(refund, MailKind.MADE, MailStatus.UNKNOWN)
        client = Client()
        device_of(support_agent)
        client.force_login(support_agent)  # a password, no code
        before = state(refund)

        response = client.post(resend_url(refund), {"post": "yes"})

        assert response.status_code == 302
        assert response["Location"].startswith(reverse("verify-second-factor") + "?")
        assert state(refund) == before
        assert CustomerMail.objects.filter(resend_of__isnull=False).count() == 0

    def test_after_the_code_the_page_asks_again_rather_than_resending(self, support_agent, refund):
        mail(refund, MailKind.MADE, MailStatus.UNKNOWN)
        client = Client()
        device_of(support_agent)
        client.force_login(support_agent)
        client.post(resend_url(refund), {"post": "yes"})  # sent to the code page
        verified(client, support_agent)
        before = state(refund)

        back = client.get(resend_url(refund))

        assert back.status_code == 200 and "Yes, resend it" in back.content.decode()
        assert state(refund) == before

    @pytest.mark.parametrize(
        ("with_mail", "address", "code"),
        [(False, ADDRESS, "mail_not_found"), (True, "", "email_invalid")],
        ids=["no mail yet", "no address"],
    )
    def test_a_refusal_is_told_with_its_code_and_writes_nothing(
        self, agent_client, refund, with_mail, address, code
    ):
        Refund.objects.filter(pk=refund.pk).update(customer_email=address)
        if with_mail:
            mail(refund, MailKind.MADE, MailStatus.SENT)
        before = state(refund)

        response = agent_client.post(resend_url(refund), {"post": "yes"})

        assert response.status_code == 302
        [message] = told(response)
        assert message.startswith("Nothing was resent: ") and message.endswith(f"({code})")
        assert state(refund) == before


class TestChangeMailAddress:
    def test_changes_the_refund_and_its_waiting_mails_and_shows_it(
        self, agent_client, support_agent, refund
    ):
        waiting = mail(refund, MailKind.SUCCEEDED, MailStatus.PENDING)
        sent = mail(refund, MailKind.MADE, MailStatus.SENT, minutes_ago=5)
        form = agent_client.get(address_url(refund))

        done = agent_client.post(
            address_url(refund),
            {"post": "yes", "address": "ana.new@example.com", "note": "typo in the order form"},
        )

        assert form.status_code == 200 and 'name="address"' in form.content.decode()
        assert done.status_code == 302 and done["Location"] == page_url(refund)
        refund.refresh_from_db()
        assert refund.customer_email == "ana.new@example.com"
        waiting.refresh_from_db()
        sent.refresh_from_db()
        assert (waiting.to, sent.to) == ("ana.new@example.com", ADDRESS)
        change = MailAddressChange.objects.get(refund=refund)
        assert (change.old_address, change.new_address, change.note, change.changed_by) == (
            ADDRESS,
            "ana.new@example.com",
            "typo in the order form",
            "user:agent",
        )
        told_as = f"Changed the customer mail address from {ADDRESS} to ana.new@example.com"
        assert mail_log(refund) == [f"{told_as}: typo in the order form"]
        assert LogEntry.objects.get(object_id=refund.pk).user == support_agent
        assert told(done) == [f"{told_as}. Mails still waiting to be sent go there too."]
        page = agent_client.get(page_url(refund)).content.decode()
        [row] = table_rows(page, "mail-address-changes")
        assert f"{ADDRESS} ana.new@example.com user:agent typo in the order form" in row
        assert "ana.new@example.com Waiting to be sent" in " ".join(
            table_rows(page, "customer-mails")
        )

    @pytest.mark.parametrize(
        ("address", "note", "code", "field"),
        [
            ("not an address", "customer phoned", "email_invalid", "address"),
            ("ana@example.com\nBcc: x@example.com", "customer phoned", "email_invalid", "address"),
            ("", "customer phoned", "email_invalid", "address"),
            ("ana.new@example.com", "", "note_required", "note"),
            ("ana.new@example.com", "   ", "note_required", "note"),
        ],
        ids=["bad address", "header injection", "no address", "no note", "blank note"],
    )
    def test_a_refusal_redraws_the_form_with_its_code_and_changes_nothing(
        self, agent_client, refund, address, note, code, field
    ):
        mail(refund, MailKind.SUCCEEDED, MailStatus.PENDING)
        before = state(refund)

        response = agent_client.post(
            address_url(refund), {"post": "yes", "address": address, "note": note}
        )

        assert response.status_code == 200
        [message] = told(response)
        assert message.startswith("The address was not changed: ")
        assert message.endswith(f"({code})")
        assert f"({code})" in response.context["form"].errors[field][0]
        assert state(refund) == before

    def test_without_a_fresh_code_nothing_changes_and_the_form_comes_back_filled(
        self, support_agent, refund
    ):
        client = Client()
        device_of(support_agent)
        client.force_login(support_agent)
        before = state(refund)
        typed = {"post": "yes", "address": "ana.new@example.com", "note": "customer phoned"}

        refused = client.post(address_url(refund), typed)
        unchanged = state(refund)
        verified(client, support_agent)
        back = client.get(address_url(refund))

        assert refused.status_code == 302
        assert refused["Location"].startswith(reverse("verify-second-factor") + "?")
        assert unchanged == before == state(refund)
        page = back.content.decode()
        assert 'value="ana.new@example.com"' in page and "customer phoned" in page


class TestWhoMay:
    def test_staff_without_the_refund_permission_see_no_button_and_get_403(
        self, viewer, viewer_client, refund
    ):
        mail(refund, MailKind.MADE, MailStatus.BOUNCED, outcome="bounced: 550")
        assert not viewer.has_perm("ledger_app.refund_charge")
        before = state(refund)

        page = viewer_client.get(page_url(refund)).content.decode()
        answers = [
            viewer_client.get(resend_url(refund)),
            viewer_client.post(resend_url(refund), {"post": "yes"}),
            viewer_client.get(address_url(refund)),
            viewer_client.post(
                address_url(refund),
                {"post": "yes", "address": "thief@example.com", "note": "mine now"},
            ),
        ]

        assert "Not delivered" in page  # they see the mails...
        assert "Resend last mail…" not in page and "Change mail address…" not in page
        assert resend_url(refund) not in page and address_url(refund) not in page
        assert [a.status_code for a in answers] == [403, 403, 403, 403]
        assert state(refund) == before  # ...and change nothing

    def test_an_unknown_refund_is_404(self, agent_client):
        url = reverse("admin:ledger_app_refund_resend_mail", args=["re_nosuchrefund"])

        assert agent_client.post(url, {"post": "yes"}).status_code == 404


class TestOnTheQueues:
    def test_a_queue_page_offers_the_buttons_and_logs_on_the_refund(self, agent_client):
        charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "timeout"})
        waiting = create_refund(RefundRequest(charge_id=charge.pk, amount=300)).item
        Refund.objects.filter(pk=waiting.pk).update(customer_email=ADDRESS)
        mail(waiting, MailKind.MADE, MailStatus.UNKNOWN)
        queue_page = reverse("admin:ledger_app_refundattention_change", args=[quote(waiting.pk)])
        resend = reverse("admin:ledger_app_refundattention_resend_mail", args=[quote(waiting.pk)])

        page = agent_client.get(queue_page).content.decode()
        done = agent_client.post(resend, {"post": "yes"})

        assert f'href="{resend}"' in page and "May not have been sent" in page
        assert done.status_code == 302 and done["Location"] == queue_page
        assert mail_log(waiting) == [f"Resent the last customer mail (Refund made) to {ADDRESS}"]
