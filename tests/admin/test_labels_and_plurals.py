"""What people read: choices by their labels (the API and files keep the stored values), a
refund without a reason shown as none, counts with the right noun, and a dry run that says
what it would do."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.core.management import CommandError, call_command
from django.urls import reverse

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Charge, LedgerEntry, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db

REFUNDS = reverse("admin:ledger_app_refund_changelist")
CHARGES = reverse("admin:ledger_app_charge_changelist")


def text_of(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def filter_links(response, parameter: str) -> dict[str, str]:
    """The list filter's choices for `parameter`: value -> the words on its link."""
    found = re.findall(
        rf'<a href="\?{parameter}=([^"&]*)"[^>]*>\s*([^<]*?)\s*</a>', response.content.decode()
    )
    return dict(found)


def column(response, field: str) -> list[str]:
    pattern = rf'<td class="field-{field}[^"]*">(.*?)</td>'
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(pattern, response.content.decode(), re.S)
    ]


def told(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def hidden(response, name: str) -> str:
    found = re.search(rb'name="' + name.encode() + rb'" value="([^"]*)"', response.content)
    assert found, f"no hidden {name} on the page"
    return found[1].decode()


class TestLabels:
    def test_the_refund_filters_read_as_words_not_stored_values(self, admin_client):
        page = admin_client.get(REFUNDS)

        assert (
            filter_links(page, "source__exact").items()
            >= {
                "admin": "Admin",
                "api": "API",
                "cli": "Command line",
                "bulk": "Bulk file",
                "system": "System",
            }.items()
        )
        assert filter_links(page, "reason__exact")["requested_by_customer"] == (
            "Requested by customer"
        )
        assert filter_links(page, "status__exact")["awaiting_approval"] == "Awaiting approval"
        for generated in ["Requested By Customer", "Api", "Cli", "Awaiting Approval"]:
            assert f">{generated}<" not in page.content.decode()

    def test_the_ledger_and_event_filters_too(self, admin_client):
        ledger = admin_client.get(reverse("admin:ledger_app_ledgerentry_changelist"))
        events = admin_client.get(reverse("admin:ledger_app_event_changelist"))

        assert filter_links(ledger, "kind__exact")["refund_reserved"] == "Refund reserved"
        assert filter_links(events, "type__exact")["refund.updated"] == "Refund updated"

    def test_columns_and_object_pages_show_labels(self, admin_client, support_agent):
        RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=100)
        charge = ChargeFactory(amount=5_000)
        waiting = create_refund(
            RefundRequest(charge_id=charge.pk, amount=1_000, actor=support_agent)
        ).item
        by_cli = create_refund(
            RefundRequest(
                charge_id=charge.pk,
                amount=500,
                reason=Refund.Reason.REQUESTED_BY_CUSTOMER,
                source=Refund.Source.CLI,
            )
        ).item

        refunds = admin_client.get(REFUNDS)
        ledger = admin_client.get(reverse("admin:ledger_app_ledgerentry_changelist"))
        page = admin_client.get(reverse("admin:ledger_app_refund_change", args=[quote(by_cli.pk)]))

        assert waiting.status == Refund.Status.AWAITING_APPROVAL
        assert "Awaiting approval" in column(refunds, "status")
        assert "Refund reserved" in column(ledger, "kind")
        assert "Requested by customer" in text_of(page) and "Command line" in text_of(page)
        assert "requested_by_customer" not in text_of(page)

    def test_the_charge_page_history_shows_labels(self, admin_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=500, reason=Refund.Reason.REQUESTED_BY_CUSTOMER
            )
        )

        page = text_of(
            admin_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))
        )

        assert "Requested by customer" in page and "Refund reserved" in page
        assert "refund_reserved" not in page and "requested_by_customer" not in page

    def test_the_api_and_the_bulk_report_keep_the_stored_values(self, client, tmp_path):
        charge = ChargeFactory(amount=5_000)
        refund = create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=500, reason=Refund.Reason.REQUESTED_BY_CUSTOMER
            )
        ).item
        secret = create_api_key(name="labels")[1]
        file = tmp_path / "in.csv"
        file.write_text(f"charge,amount,reason\n{charge.pk},100,duplicate\n")

        body = client.get(f"/v1/refunds/{refund.pk}", HTTP_AUTHORIZATION=f"Bearer {secret}").json()
        call_command(
            "bulk_refund",
            str(file),
            "--batch-id",
            "b",
            "--report",
            str(tmp_path / "r.csv"),
            stdout=io.StringIO(),
        )
        with (tmp_path / "r.csv").open(newline="") as handle:
            [row] = list(csv.DictReader(handle))

        assert (body["reason"], body["status"]) == ("requested_by_customer", "succeeded")
        assert (row["outcome"], row["status"]) == ("refunded", "succeeded")


class TestARefundWithoutAReason:
    def test_shows_none_not_other(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=500, actor="api_key:sk_test"))

        page = agent_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))

        reasons = re.findall(r'<td class="reason">([^<]*)</td>', page.content.decode())
        assert reasons == ["—"]

    def test_the_admin_history_says_no_reason(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        form = agent_client.get(
            reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)]), follow=True
        )

        agent_client.post(
            reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)]),
            {
                "amount": "1.00",
                "reason": "other",  # the form's "Other (explain in the note)": no reason
                "note": "Goodwill",
                "idempotency_key": hidden(form, "idempotency_key"),
                "charge_state": hidden(form, "charge_state"),
            },
        )

        refund = Refund.objects.get(charge=charge)
        [entry] = LogEntry.objects.filter(object_id=charge.pk)
        assert refund.reason == ""
        assert entry.get_change_message() == (
            f"Refunded $1.00 as {refund.pk} (no reason): Goodwill"
        )


class TestPlurals:
    def bulk_refund_in_full(self, client, charges):
        chosen = {"action": "refund_in_full", "_selected_action": [c.pk for c in charges]}
        page = client.post(CHARGES, chosen)
        return client.post(
            CHARGES,
            {
                **chosen,
                "post": "yes",
                "batch_key": hidden(page, "batch_key"),
                "confirmed": hidden(page, "confirmed"),
                "reason": "duplicate",
                "note": "cleanup",
            },
        )

    def test_the_admin_bulk_refund_counts_one_charge_and_two_charges(self, agent_client):
        one = ChargeFactory(amount=1_000)
        two = [ChargeFactory(amount=2_000), ChargeFactory(amount=3_000)]
        done = ChargeFactory(amount=500)
        create_refund(RefundRequest(charge_id=done.pk))

        first = told(self.bulk_refund_in_full(agent_client, [one, done]))
        second = told(self.bulk_refund_in_full(agent_client, two))

        assert [m for m in first if m.startswith("Refunded")] == [
            f"Refunded: 1 charge — {one.pk} $10.00 ({Refund.objects.get(charge=one).pk})"
        ]
        assert f"Not refunded, nothing to refund: 1 charge — {done.pk} (fully refunded)" in first
        [refunded] = [m for m in second if m.startswith("Refunded")]
        assert refunded.startswith("Refunded: 2 charges — ")
        assert all(c.pk in refunded for c in two)
        assert Charge.objects.filter(amount_refunded=0).count() == 0

    def test_bulk_refund_counts_one_row_and_two_rows(self, tmp_path):
        charge = ChargeFactory(amount=5_000)
        one = tmp_path / "one.csv"
        one.write_text(f"charge,amount\n{charge.pk},100\n")
        two = tmp_path / "two.csv"
        # not $1.00 again: that would repeat the first batch (repeat_of_earlier)
        two.write_text(f"charge,amount\n{charge.pk},300\n{charge.pk},200\n")

        out_one, out_two = io.StringIO(), io.StringIO()
        call_command("bulk_refund", str(one), "--batch-id", "one", stdout=out_one)
        call_command("bulk_refund", str(two), "--batch-id", "two", stdout=out_two)

        assert out_one.getvalue().startswith("bulk_refund: 1 row: 1 refunded;")
        assert out_two.getvalue().startswith("bulk_refund: 2 rows: 2 refunded;")

    @pytest.mark.parametrize(
        ("rows", "said"), [(1, "1 row was refused"), (2, "2 rows were refused")]
    )
    def test_bulk_refund_counts_refused_rows(self, tmp_path, rows, said):
        file = tmp_path / "in.csv"
        file.write_text("charge,amount\n" + "ch_missing,100\n" * rows)

        with pytest.raises(CommandError) as refused:
            call_command("bulk_refund", str(file), "--batch-id", "b", stdout=io.StringIO())

        assert str(refused.value) == said

    def test_list_api_keys_counts_one_key_and_two_keys(self):
        create_api_key(name="first")
        one = io.StringIO()
        call_command("list_api_keys", stdout=one)
        create_api_key(name="second")
        two = io.StringIO()
        call_command("list_api_keys", stdout=two)

        assert one.getvalue().splitlines()[-1] == "1 key"
        assert two.getvalue().splitlines()[-1] == "2 keys"


class TestTheDryRun:
    def test_says_would_refund_and_refunds_nothing(self, tmp_path):
        charge = ChargeFactory(amount=5_000)
        file = tmp_path / "in.csv"
        file.write_text(f"charge,amount\n{charge.pk},1000\n{charge.pk},500\n")
        before = LedgerEntry.objects.count()
        out = io.StringIO()

        call_command("bulk_refund", str(file), "--batch-id", "b", "--dry-run", stdout=out)

        line = out.getvalue().strip()
        assert line == "bulk_refund (dry run): 2 rows: 2 would_refund; would refund: usd $15.00"
        assert "refunded" not in line
        assert Refund.objects.count() == 0 and LedgerEntry.objects.count() == before

    def test_a_real_run_still_says_refunded(self, tmp_path):
        charge = ChargeFactory(amount=5_000)
        file = tmp_path / "in.csv"
        file.write_text(f"charge,amount\n{charge.pk},1000\n")
        out = io.StringIO()

        call_command("bulk_refund", str(file), "--batch-id", "b", stdout=out)

        assert out.getvalue().strip() == "bulk_refund: 1 row: 1 refunded; refunded: usd $10.00"
