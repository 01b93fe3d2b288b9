"""The books against the provider in the admin, as it is deployed (the second factor on, staff
in the groups the migrations make; a month of days all closed is read from this page by
tests/services/test_books.py, which lives one month for the command, the metric and the
page together): a refund the provider never booked shown as an open day and a difference
beside its refund and charge; a lead's explanation (through the second factor, in the admin
log) closing the day, refused to staff without the permission, without a fresh code or
without a note; the differences as CSV."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from ledger_app.charges.services import create_charge
from ledger_app.models import BalanceTransaction, BooksDay, BooksDifference, Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.admin.admin_rows import listed, text
from tests.books_month import FIRST_DAY, live_a_month
from tests.factories import AGENTS_MIGRATION, LEADS_MIGRATION, migration_group
from tests.second_factor import device_of, verified
from tests.services.people import staff
from tests.spreadsheet import NO_FORMULAS, formulas_in, rows_of

# The month is lived through the sync and close_books, which commit on their own.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]

DAYS_LIST = reverse("admin:ledger_app_booksday_changelist")
DIFFERENCES = reverse("admin:ledger_app_booksdifference_changelist")
EXPORT = reverse("admin:ledger_app_booksdifference_export")
NOTE = "Provider support confirmed the refund left: ticket 4411, booked on their side late."


def told(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def explain_action(client: Client, differences, **confirm: str):
    """The differences list's "Explain…": its page, or with post=yes its result."""
    return client.post(
        DIFFERENCES,
        {
            "action": "explain_differences",
            "_selected_action": [d.pk for d in differences],
            "index": "0",
            **confirm,
        },
    )


@pytest.fixture
def lead(django_user_model):
    return staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))


@pytest.fixture
def agent(django_user_model):
    return staff(django_user_model, "agent", migration_group(AGENTS_MIGRATION))


@pytest.fixture
def dropped():
    """Two days of the month and three quiet ones, where on the first a charge's refund is
    one the provider never books (simulated_provider/books.py: refund_dropped): that day
    holds one difference, the refund missing at the provider. (charge, refund, difference)"""
    planted: list[Charge] = []

    def plant(traveller, day, n):
        if n == 0:
            metadata = {"simulate_books": "refund_dropped"}
            planted.append(create_charge(amount=5_000, currency="usd", metadata=metadata).item)
            create_refund(RefundRequest(charge_id=planted[0].pk, amount=2_000))

    live_a_month(days=2, then=3, each_day=plant)
    (charge,) = planted
    refund = Refund.objects.get(charge=charge)
    return charge, refund, BooksDifference.objects.get(refund=refund)


class TestARefundTheProviderNeverBooked:
    def test_its_day_is_open_with_the_difference_by_kind(self, lead, dropped):
        client = verified(Client(), lead)

        rows = listed(client, DAYS_LIST, currency="usd")

        first = [row for row in rows if text(row["day_display"]) == FIRST_DAY.isoformat()]
        (day,) = first
        assert text(day["status"]) == "Open"
        assert day["matched_display"]["text"] == ["$10.00", "33.33%"]  # of $10.00 and $20.00
        assert text(day["differences_display"]) == "1 missing at the provider"
        assert text(day["closed_at"]) == "-"
        assert all(text(row["status"]) == "Closed" for row in rows if row is not day)
        index = client.get(reverse("admin:index")).content.decode()
        assert "Days of the books open</a>: <strong" in index
        (only,) = listed(client, DAYS_LIST, status__exact="open")
        assert text(only["day_display"]) == FIRST_DAY.isoformat()

    def test_the_difference_is_listed_beside_its_refund_and_charge(self, lead, dropped):
        charge, refund, difference = dropped
        client = verified(Client(), lead)
        (day,) = listed(client, DAYS_LIST, status__exact="open")

        (row,) = listed(client, day["differences_display"]["links"][0].replace("&amp;", "&"))

        assert text(row["kind"]) == "Missing at the provider"
        assert row["refund_and_charge"]["text"] == [refund.pk, charge.pk]
        assert row["refund_and_charge"]["links"] == [
            reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)]),
            reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]),
        ]
        assert row["amounts"]["text"] == ["Ledger", "-$20.00", "Provider", "none"]
        assert text(row["balance_transaction_cell"]) == "None listed by the provider"
        assert text(row["explained_display"]) == "No"
        page = client.get(reverse("admin:ledger_app_booksdifference_change", args=[difference.pk]))
        assert (
            refund.pk in page.content.decode() and "No balance transaction" in page.content.decode()
        )

    def test_each_page_of_the_books_opens_for_an_agent(self, agent, dropped):
        _, _, difference = dropped
        client = verified(Client(), agent)
        day = BooksDay.objects.get(day=FIRST_DAY, currency="usd")
        paid = BalanceTransaction.objects.exclude(payout="").first()
        assert paid is not None
        pages = [
            reverse("admin:ledger_app_booksday_change", args=[day.pk]),
            reverse("admin:ledger_app_booksdifference_change", args=[difference.pk]),
            reverse("admin:ledger_app_balancetransaction_change", args=[quote(paid.pk)]),
            reverse("admin:ledger_app_payout_change", args=[quote(paid.payout)]),
            reverse("admin:ledger_app_balancetransaction_changelist"),
            reverse("admin:ledger_app_payout_changelist"),
        ]

        answers = {url: client.get(url).status_code for url in pages}

        assert answers == dict.fromkeys(pages, 200)
        paid_out = listed(
            client, reverse("admin:ledger_app_balancetransaction_changelist"), q=paid.payout
        )
        assert paid.pk in [text(row["id_display"]) for row in paid_out]

    def test_a_leads_explanation_closes_the_day_and_is_logged(self, lead, dropped):
        _, refund, difference = dropped
        client = verified(Client(), lead)

        shown = explain_action(client, [difference])
        done = explain_action(client, [difference], post="yes", note=NOTE)

        assert shown.status_code == 200
        assert refund.pk in shown.content.decode() and "Yes, explain it" in shown.content.decode()
        assert done.status_code == 302
        assert told(done) == [
            f"Explained: 1 difference — {FIRST_DAY} refund {refund.pk}",
            f"The books now: {FIRST_DAY} USD: closed",
        ]
        difference.refresh_from_db()
        assert (difference.explanation, difference.explained_by) == (NOTE, "user:lead")
        day = BooksDay.objects.get(day=FIRST_DAY, currency="usd")
        assert (day.status, day.matched, day.differences) == ("closed", day.refunded, {})
        (entry,) = LogEntry.objects.filter(object_id=str(difference.pk))
        assert (entry.user, entry.action_flag) == (lead, CHANGE)
        assert entry.get_change_message() == f"Explained: {NOTE}"
        (row,) = [r for r in listed(client, DAYS_LIST) if text(r["day_display"]) == str(FIRST_DAY)]
        assert (text(row["status"]), row["matched_display"]["text"][-1]) == ("Closed", "100%")

    def test_staff_without_the_permission_cannot_explain(self, agent, dropped):
        _, _, difference = dropped
        client = verified(Client(), agent)

        page = client.get(DIFFERENCES).content.decode()
        posted = explain_action(client, [difference], post="yes", note=NOTE)

        assert "Explain…" not in page and difference.refund_id in page  # sees it, no action
        assert posted.status_code == 200 and told(posted) == []  # the list, drawn again
        assert_unexplained(difference)

    def test_without_a_fresh_code_a_lead_is_asked_for_one_and_nothing_changes(self, lead, dropped):
        _, _, difference = dropped
        device_of(lead)
        client = Client()
        client.force_login(lead)  # a password alone

        posted = explain_action(client, [difference], post="yes", note=NOTE)

        assert posted.status_code == 302
        assert posted.url.startswith(reverse("verify-second-factor"))
        assert_unexplained(difference)

    def test_an_empty_note_is_refused_and_changes_nothing(self, lead, dropped):
        _, _, difference = dropped
        client = verified(Client(), lead)

        posted = explain_action(client, [difference], post="yes", note="   ")

        assert posted.status_code == 200
        assert "Say why the differences are as they should be. (note_required)" in (
            posted.content.decode()
        )
        assert_unexplained(difference)

    def test_the_csv_export_holds_the_differences(self, lead, dropped, django_user_model):
        charge, refund, difference = dropped
        client = verified(Client(), lead)

        export = client.get(EXPORT, {"explained": "no"})

        rows = rows_of(client.get(EXPORT, {"explained": "no"}))
        assert formulas_in(b"".join(export.streaming_content).decode()) == NO_FORMULAS
        assert [(r["id"], r["day"], r["kind"], r["refund"], r["charge"]) for r in rows] == [
            (str(difference.pk), str(FIRST_DAY), "missing_at_provider", refund.pk, charge.pk)
        ]
        (row,) = rows
        assert (row["currency"], row["ledger_amount"], row["provider_amount"]) == (
            "usd",
            "-2000",
            "",
        )
        assert (row["ledger_amount_formatted"], row["provider_amount_formatted"]) == (
            "'-$20.00",
            "",
        )
        assert rows_of(client.get(EXPORT, {"explained": "yes"})) == []
        looker = staff(django_user_model, "looker")
        looker.user_permissions.add(Permission.objects.get(codename="view_booksdifference"))
        assert verified(Client(), looker).get(EXPORT).status_code == 403  # no export permission


def assert_unexplained(difference: BooksDifference) -> None:
    difference.refresh_from_db()
    assert (difference.explanation, difference.explained_by, difference.explained_at) == (
        "",
        "",
        None,
    )
    assert BooksDay.objects.get(day=difference.day, currency="usd").status == "open"
    assert not LogEntry.objects.filter(object_id=str(difference.pk)).exists()
