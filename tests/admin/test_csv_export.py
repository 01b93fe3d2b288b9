"""CSV export of the admin lists: the rows the list selects (filters, search, ordering, every
page), money in minor units and formatted, times in UTC, formulas defused, streamed in
constant memory, and only for staff with the export permission."""

from __future__ import annotations

import logging
import re
import tracemalloc
from datetime import UTC, datetime

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from ledger_app import replica
from ledger_app.ledger.services import append_entry
from ledger_app.models import Charge, LedgerEntry, Refund, new_charge_id
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.spreadsheet import HOSTILE_CELLS, NO_FORMULAS, formulas_in, header_of, rows_of

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]

CHARGES = "admin:ledger_app_charge_changelist"
CHARGES_CSV = "admin:ledger_app_charge_export"
REFUNDS_CSV = "admin:ledger_app_refund_export"
LEDGER_CSV = "admin:ledger_app_ledgerentry_export"
CHARGE_HEADER = [
    "id",
    "amount",
    "amount_formatted",
    "amount_refunded",
    "amount_refunded_formatted",
    "currency",
    "status",
    "status_detail",
    "customer",
    "description",
    "metadata",
    "provider_charge_id",
    "provider_idempotency_key",
    "dispatch_attempts",
    "created_at",
    "updated_at",
]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def staff_client(django_user_model, *codenames: str) -> Client:
    user = django_user_model.objects.create_user("staff", password="staff-pass-123", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ledger_app", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


class TestWhatIsExported:
    def test_only_the_rows_the_filter_and_search_select_with_money_and_times_spelled_out(
        self, admin_client
    ):
        kwd = ChargeFactory(
            amount=12_345,
            currency="kwd",
            description="Order alpha, dinars",
            customer="cus_1",
            metadata={"order": "A-1"},
            created_at=at("2026-11-30T19:24:05.123456"),
        )
        jpy = ChargeFactory(
            amount=1_250,
            currency="jpy",
            description="Order alpha, yen",
            created_at=at("2026-11-30T20:00:00"),
        )
        ChargeFactory(amount=1_250, status="failed", description="Order alpha, declined")
        ChargeFactory(amount=999, description="Something else")

        response = admin_client.get(
            reverse(CHARGES_CSV), {"status__exact": "succeeded", "q": "alpha"}
        )

        assert response.streaming
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        assert re.fullmatch(
            r'attachment; filename="charges-\d{4}-\d\d-\d\dT\d{4}Z\.csv"',
            response["Content-Disposition"],
        )
        rows = rows_of(response)
        assert [r["id"] for r in rows] == [jpy.pk, kwd.pk]  # the list's order: newest first
        assert list(rows[0]) == CHARGE_HEADER
        assert rows[0]["amount"] == "1250" and rows[0]["amount_formatted"] == "¥1,250"
        assert rows[1]["amount"] == "12345" and rows[1]["amount_formatted"] == "KWD12.345"
        assert rows[1]["amount_refunded"] == "0"
        assert rows[1]["amount_refunded_formatted"] == "KWD0.000"
        assert rows[1]["currency"] == "kwd" and rows[1]["status"] == "succeeded"
        assert rows[1]["created_at"] == "2026-11-30T19:24:05Z"
        assert rows[0]["created_at"] == "2026-11-30T20:00:00Z"
        assert rows[1]["customer"] == "cus_1" and rows[1]["description"] == "Order alpha, dinars"
        assert rows[1]["metadata"] == '{"order": "A-1"}'
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[1]["updated_at"])

    def test_refunds_with_who_made_them_and_choices_as_stored(self, admin_client, admin_user):
        charge = ChargeFactory(amount=5_000, currency="usd")
        other = ChargeFactory(amount=5_000, currency="usd")
        refund = create_refund(
            RefundRequest(
                charge_id=charge.pk,
                amount=1_250,
                reason="requested_by_customer",
                note="Customer called",
                actor=admin_user,
                source=Refund.Source.ADMIN,
            )
        ).item
        create_refund(RefundRequest(charge_id=charge.pk, amount=100, reason="duplicate"))
        create_refund(
            RefundRequest(charge_id=other.pk, amount=1_250, reason="requested_by_customer")
        )

        response = admin_client.get(
            reverse(REFUNDS_CSV), {"reason__exact": "requested_by_customer", "q": charge.pk}
        )

        rows = rows_of(response)
        assert [r["id"] for r in rows] == [refund.pk]
        row = rows[0]
        assert row["charge"] == charge.pk
        assert (row["amount"], row["amount_formatted"], row["currency"]) == (
            "1250",
            "$12.50",
            "usd",
        )
        assert (row["reason"], row["source"], row["note"]) == (
            "requested_by_customer",
            "admin",
            "Customer called",
        )
        assert row["created_by"] == admin_user.get_username()
        assert row["provider_idempotency_key"] == f"refund:{refund.pk}"
        assert row["handled_at"] == "" and row["decided_at"] == ""
        assert row["created_at"] == refund.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def test_ledger_entries_keep_a_negative_delta_a_number(self, admin_client, inline_dispatch):
        charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "decline"})
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=500)).item
        assert refund.status == "failed"

        response = admin_client.get(reverse(LEDGER_CSV), {"kind__exact": "refund_released"})

        rows = rows_of(response)
        assert len(rows) == 1
        assert (rows[0]["charge"], rows[0]["refund"]) == (charge.pk, refund.pk)
        assert (rows[0]["amount"], rows[0]["amount_formatted"]) == ("500", "$5.00")
        # The minor units stay a number to sum; the formatted amount is text for people,
        # and text that starts with "-" is defused like any other.
        assert (rows[0]["refunded_delta"], rows[0]["refunded_delta_formatted"]) == (
            "-500",
            "'-$5.00",
        )

    def test_the_ordering_chosen_on_the_list_is_the_exports(self, admin_client):
        amounts = [300, 100, 200]
        for amount in amounts:
            ChargeFactory(amount=amount)
        changelist = admin_client.get(reverse(CHARGES)).context["cl"]
        by_amount = next(
            i
            for i, name in enumerate(changelist.list_display)
            if changelist.get_ordering_field(name) == "amount"
        )

        ascending = rows_of(admin_client.get(reverse(CHARGES_CSV), {"o": str(by_amount)}))
        descending = rows_of(admin_client.get(reverse(CHARGES_CSV), {"o": f"-{by_amount}"}))

        assert [r["amount"] for r in ascending] == ["100", "200", "300"]
        assert [r["amount"] for r in descending] == ["300", "200", "100"]

    def test_the_export_is_logged_with_who_what_and_how_many(self, admin_client, caplog):
        ChargeFactory(currency="eur")
        ChargeFactory(currency="usd")

        with caplog.at_level(logging.INFO, logger="ledger_app.admin"):
            rows = rows_of(admin_client.get(reverse(CHARGES_CSV), {"currency": "eur"}))

        assert len(rows) == 1
        assert "csv export started: user=admin list=charges query='currency=eur'" in caplog.text
        assert "csv export finished: list=charges rows=1" in caplog.text


class TestFormulaInjection:
    def test_text_that_starts_like_a_formula_is_shown_never_run(self, admin_client):
        texts = ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]
        for n, description in enumerate(texts):
            ChargeFactory(amount=100 + n, description=description, customer=f"c{n}")
        ChargeFactory(amount=99, description="a=b, -1 is fine", customer="=1+1")

        rows = rows_of(admin_client.get(reverse(CHARGES_CSV), {"currency": "usd"}))

        described = {r["description"] for r in rows}
        assert described == {"'" + t for t in texts} | {"a=b, -1 is fine"}
        assert {r["customer"] for r in rows if r["amount"] == "99"} == {"'=1+1"}
        assert sorted(int(r["amount"]) for r in rows) == [99, 100, 101, 102, 103, 104, 105]

    def test_a_refund_note_from_an_api_client_is_defused(self, admin_client):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=100, note="=cmd|' /C calc'!A0"))

        rows = rows_of(admin_client.get(reverse(REFUNDS_CSV)))

        assert rows[0]["note"] == "'=cmd|' /C calc'!A0"

    def test_every_export_runs_no_hostile_cell_in_a_spreadsheet_set_to_commas_or_semicolons(
        self, admin_client
    ):
        for n, cell in enumerate(HOSTILE_CELLS):
            charge = ChargeFactory(
                amount=5_000 + n, description=cell, customer=cell, metadata={"k": cell}
            )
            refund = create_refund(
                RefundRequest(charge_id=charge.pk, amount=100, note=cell, metadata={"order": cell})
            ).item
            append_entry(
                charge=charge,
                refund=refund,
                kind=LedgerEntry.Kind.REFUND_SUCCEEDED,
                amount=100,
                memo=cell,
            )

        for name in (CHARGES_CSV, REFUNDS_CSV, LEDGER_CSV):
            response = admin_client.get(reverse(name))
            assert response.status_code == 200
            body = b"".join(response.streaming_content).decode("utf-8")

            assert body.count("calc") >= 4, name  # the hostile cells are in it
            assert formulas_in(body) == NO_FORMULAS, name

    def test_the_findings_cell_is_one_cell_for_a_spreadsheet_set_to_semicolons(self, admin_client):
        ChargeFactory(amount=700, description="x;=cmd|' /C calc'!A0")

        body = b"".join(admin_client.get(reverse(CHARGES_CSV)).streaming_content).decode()

        assert "\"x;'=cmd|' /C calc'!A0\"" in body
        assert formulas_in(body) == NO_FORMULAS


class TestPermission:
    def test_staff_who_may_only_look_get_no_button_and_403(self, django_user_model):
        client = staff_client(django_user_model, "view_charge")

        page = client.get(reverse(CHARGES))
        export = client.get(reverse(CHARGES_CSV))

        assert page.status_code == 200
        assert b"Export CSV" not in page.content
        assert export.status_code == 403

    def test_staff_who_may_export_get_the_button_with_their_filters_and_the_file(
        self, django_user_model
    ):
        ChargeFactory(currency="eur", description="kept")
        ChargeFactory(currency="usd", description="left out")
        client = staff_client(django_user_model, "view_charge", "export_charge")

        page = client.get(reverse(CHARGES), {"currency": "eur", "q": "kept", "p": "1"})
        href = re.search(rb'<a href="([^"]+)"[^>]*>Export CSV</a>', page.content)

        assert page.status_code == 200 and href is not None
        url = href.group(1).decode().replace("&amp;", "&")
        assert url == reverse(CHARGES_CSV) + "?currency=eur&q=kept"
        assert [r["description"] for r in rows_of(client.get(url))] == ["kept"]

    def test_the_export_permission_alone_does_not_open_a_list(self, django_user_model):
        client = staff_client(django_user_model, "export_charge", "export_refund")

        assert client.get(reverse(CHARGES_CSV)).status_code == 403
        assert client.get(reverse(REFUNDS_CSV)).status_code == 403

    def test_one_models_permission_does_not_export_another(self, django_user_model):
        client = staff_client(django_user_model, "view_charge", "view_refund", "export_charge")

        assert client.get(reverse(CHARGES_CSV)).status_code == 200
        assert client.get(reverse(REFUNDS_CSV)).status_code == 403
        assert (
            b"Export CSV" not in client.get(reverse("admin:ledger_app_refund_changelist")).content
        )

    @pytest.mark.parametrize(
        "model", ["charge", "refund", "ledgerentry", "refundattention", "refundapproval"]
    )
    def test_support_agents_may_export_every_ledger_list(self, agent_client, model):
        ChargeFactory()

        page = agent_client.get(reverse(f"admin:ledger_app_{model}_changelist"))
        export = agent_client.get(reverse(f"admin:ledger_app_{model}_export"))

        assert page.status_code == 200 and b"Export CSV" in page.content
        assert export.status_code == 200 and export.streaming
        assert header_of(export)[0] == "id"

    def test_a_post_is_not_an_export(self, admin_client):
        assert admin_client.post(reverse(CHARGES_CSV)).status_code == 405


class TestBadFilters:
    @pytest.mark.parametrize(
        "params",
        [
            {"created_at__gte": "not a date"},
            {"no_such_field": "1"},
            {"refunds__note": "x"},
            {"amount": "twelve"},
            {"currency": "\x00"},
            {"amount__range": "1"},  # fails only when the rows are read
        ],
    )
    def test_a_filter_the_list_cannot_apply_is_a_clear_400(self, admin_client, params):
        ChargeFactory()
        before = Charge.objects.count(), LedgerEntry.objects.count()

        response = admin_client.get(reverse(CHARGES_CSV), params)

        assert response.status_code == 400
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert b"(invalid_filter)" in response.content
        assert (Charge.objects.count(), LedgerEntry.objects.count()) == before


class TestReplica:
    def test_an_export_reads_where_its_list_reads(self, admin_client, monkeypatch):
        asked = []

        def reads():
            asked.append(True)
            return "default"

        monkeypatch.setattr(replica, "reads", reads)
        ChargeFactory()

        rows_of(admin_client.get(reverse(CHARGES_CSV)))
        assert len(asked) == 1  # the charges list may read the replica: so may its export
        rows_of(admin_client.get(reverse("admin:ledger_app_refundattention_export")))
        assert len(asked) == 1  # the attention queue reads the primary: so does its export


class TestStreaming:
    def test_every_page_streams_in_memory_that_does_not_grow_with_the_rows(
        self, admin_client, monkeypatch
    ):
        """5,000 rows cost no more memory than 500: the rows are read in chunks, and each
        piece of the file is let go once it is sent. Reading them all first (list()) makes
        the 5,000-row peak several times the 500-row one."""
        monkeypatch.setattr(admin.site._registry[Charge], "export_chunk_size", 200)
        Charge.objects.bulk_create(
            Charge(
                id=new_charge_id(),
                amount=1_000 + n,
                currency="eur" if n % 10 == 0 else "usd",
                status=Charge.Status.PENDING,
                description=f"Order {n} " + "x" * 60,
                customer=f"cus_{n}",
                metadata={"order": n},
            )
            for n in range(5_000)
        )

        def peak_while_streaming(params) -> tuple[int, int]:
            tracemalloc.start()
            try:
                response = admin_client.get(reverse(CHARGES_CSV), params)
                assert response.status_code == 200 and response.streaming
                lines = sum(piece.count(b"\r\n") for piece in response.streaming_content)
                return lines - 1, tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()

        peak_while_streaming({"currency": "eur"})  # warm-up: templates, imports, caches
        small, small_peak = peak_while_streaming({"currency": "eur"})
        large, large_peak = peak_while_streaming({"p": "3"})  # page 3 on screen: all exported

        assert (small, large) == (500, 5_000)
        assert large_peak <= 2 * small_peak, (small_peak, large_peak)
