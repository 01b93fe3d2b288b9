"""GET /v1/balance_transactions and /v1/payouts: the provider's balance transactions and
payouts as the books mirrored them, listed newest first and retrieved in Stripe's shape,
with Stripe's filters and paging; every bad parameter a 4xx in Stripe's envelope with a
stable code, never a 5xx, and nothing written; through the official stripe package too."""

from __future__ import annotations

import pytest
import stripe

from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.rendering.books import (
    BalanceTransactionSerializer,
    PayoutSerializer,
    render_balance_transaction,
    render_payout,
)
from tests.api.books_rows import DAY, T, a_few_days_of_books, books_as_they_are, day_of
from tests.api.stripe_fields import problems
from tests.api.stripe_package_fields import package_problems
from tests.invariants import rows_written

BTS = "/v1/balance_transactions"


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content[:300]
    return [obj["id"] for obj in response.json()["data"]]


@pytest.fixture
def books(db):
    return a_few_days_of_books()


@pytest.mark.django_db
class TestListing:
    def test_balance_transactions_newest_first_in_stripes_shape(self, api, books):
        listed = api.get(BTS).json()

        assert (listed["object"], listed["url"], listed["has_more"]) == ("list", BTS, False)
        assert [bt["id"] for bt in listed["data"]] == books.moved
        for shown in listed["data"]:
            assert problems(shown, "balance_transaction") == [], shown["id"]
            assert shown == render_balance_transaction(
                BalanceTransaction.objects.get(pk=shown["id"])
            )
        refund = listed["data"][3]
        assert (refund["amount"], refund["net"], refund["source"]) == (-2_500, -2_500, "re_usd")
        assert refund["fee_details"] == []
        dispute = listed["data"][0]
        assert dispute["fee_details"][0]["description"] == "Dispute fee"

    def test_payouts_newest_first_in_stripes_shape(self, api, books):
        listed = api.get("/v1/payouts").json()

        assert (listed["object"], listed["url"]) == ("list", "/v1/payouts")
        assert [p["id"] for p in listed["data"]] == books.payouts
        for shown in listed["data"]:
            assert package_problems(shown, "payout") == [], shown["id"]
        blank, eur, usd = listed["data"]
        assert blank["status"] == "paid"  # listed with none: Stripe's default
        assert (eur["method"], eur["reconciliation_status"]) == ("instant", "not_applicable")
        assert (usd["balance_transaction"], usd["reconciliation_status"]) == (
            "txn_payout_usd",
            "completed",
        )

    @pytest.mark.parametrize("path", [BTS, "/v1/payouts"])
    def test_pages_by_cursor_both_ways(self, api, books, path):
        every = ids(api.get(path, {"limit": 100}))

        first = api.get(path, {"limit": 2}).json()
        after = api.get(path, {"limit": 2, "starting_after": every[1]}).json()
        before = api.get(path, {"limit": 2, "ending_before": every[-1]}).json()

        assert [o["id"] for o in first["data"]] == every[:2] and first["has_more"]
        assert [o["id"] for o in after["data"]] == every[2:4]
        assert [o["id"] for o in before["data"]] == every[-3:-1]
        assert before["has_more"] is (len(every) > 3)

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ({"payout": "po_usd"}, ["txn_payout_usd", "txn_refund_usd", "txn_charge_usd"]),
            ({"payout": "po_nothing"}, []),
            ({"type": "refund"}, ["txn_refund_usd"]),
            ({"type": "adjustment"}, ["txn_dispute_usd"]),
            ({"type": "transfer"}, []),
            ({"source": "ch_eur"}, ["txn_charge_eur"]),
            ({"currency": "eur"}, ["txn_charge_eur"]),
            ({"currency": "EUR"}, ["txn_charge_eur"]),
            ({"created[gte]": T + 10, "created[lt]": T + 30}, ["txn_charge_eur", "txn_refund_usd"]),
            ({"created[gt]": T + 30}, ["txn_dispute_usd"]),
            ({"created[lte]": T}, ["txn_charge_usd"]),
            ({"created": T + 20}, ["txn_charge_eur"]),
            ({"payout": "po_usd", "type": "charge", "currency": "usd"}, ["txn_charge_usd"]),
            (
                {"payout": "po_usd", "limit": 1, "starting_after": "txn_payout_usd"},
                ["txn_refund_usd"],
            ),
        ],
    )
    def test_balance_transaction_filters(self, api, books, query, expected):
        assert ids(api.get(BTS, query)) == expected

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ({"status": "paid"}, ["po_blank", "po_usd"]),
            ({"status": "in_transit"}, ["po_eur"]),
            ({"status": "failed"}, []),
            ({"created[gte]": T + 50}, ["po_blank", "po_eur"]),
            ({"created": T + 30}, ["po_usd"]),
            ({"arrival_date": int(day_of(T + 2 * DAY).timestamp())}, ["po_eur", "po_usd"]),
            ({"arrival_date[gt]": T + 2 * DAY}, ["po_blank"]),
            ({"arrival_date[lt]": T + 3 * DAY, "status": "paid"}, ["po_usd"]),
        ],
    )
    def test_payout_filters(self, api, books, query, expected):
        assert ids(api.get("/v1/payouts", query)) == expected

    def test_a_read_only_key_reads_them(self, client, read_only_key, books):
        auth = {"HTTP_AUTHORIZATION": f"Bearer {read_only_key}"}

        assert ids(client.get(BTS, **auth)) == books.moved
        assert client.get(f"/v1/payouts/{books.payout}", **auth).status_code == 200


@pytest.mark.django_db
class TestRetrieving:
    def test_each_as_it_is_listed(self, api, books):
        for bt_id in books.moved:
            shown = api.get(f"{BTS}/{bt_id}")
            assert shown.status_code == 200
            assert shown.json() == render_balance_transaction(
                BalanceTransaction.objects.get(pk=bt_id)
            )
        for payout_id in books.payouts:
            shown = api.get(f"/v1/payouts/{payout_id}")
            assert shown.json() == render_payout(Payout.objects.get(pk=payout_id))

    def test_the_serializers_declare_the_fields_the_renders_draw(self, books):
        bt = BalanceTransaction.objects.get(pk="txn_dispute_usd")
        paid = Payout.objects.get(pk=books.payout)

        assert list(render_balance_transaction(bt)) == list(BalanceTransactionSerializer().fields)
        assert list(render_payout(paid)) == list(PayoutSerializer().fields)

    @pytest.mark.parametrize(
        "path",
        [
            f"{BTS}/txn_nope",
            f"{BTS}/po_usd",  # a payout's id is not a balance transaction's
            f"{BTS}/" + "t" * 200,
            f"{BTS}/txn_%00",
            "/v1/payouts/po_nope",
            "/v1/payouts/txn_payout_usd",
            "/v1/payouts/%F0%9F%92%B8",
        ],
    )
    def test_an_unknown_id_is_stripes_404(self, api, books, path):
        response = api.get(path)

        assert response.status_code == 404, response.content[:300]
        error = response.json()["error"]
        assert (error["type"], error["code"], error.get("param")) == (
            "invalid_request_error",
            "resource_missing",
            None,
        )
        assert error["message"].startswith("No such ")


NO_PARAM = None
# (id, path and query, status, code, param)
# fmt: off
REFUSED = [
    ("limit-huge", f"{BTS}?limit=" + "9" * 40, 400, "parameter_invalid_integer", "limit"),
    ("limit-zero", "/v1/payouts?limit=0", 400, "parameter_invalid_integer", "limit"),
    ("limit-NUL", f"{BTS}?limit=1%00", 400, "parameter_invalid_integer", "limit"),
    ("limit-array", "/v1/payouts?limit[]=1", 400, "parameter_invalid", "limit[]"),
    ("created-huge", f"{BTS}?created[gt]=" + "9" * 40, 400, "parameter_invalid_integer",
     "created[gt]"),
    ("created-negative", "/v1/payouts?created[gte]=-1", 400, "parameter_invalid_integer",
     "created[gte]"),
    ("created-eq", f"{BTS}?created[eq]=1", 400, "parameter_unknown", "created[eq]"),
    ("created-twice", f"{BTS}?created=1&created[gt]=2", 400, "parameter_invalid", "created"),
    ("arrival-date-past-9999", "/v1/payouts?arrival_date[lte]=253402300800", 400,
     "parameter_invalid_integer", "arrival_date[lte]"),
    ("arrival-date-text", "/v1/payouts?arrival_date=tomorrow", 400,
     "parameter_invalid_integer", "arrival_date"),
    ("arrival-date-nested", "/v1/payouts?arrival_date[gt][x]=1", 400, "parameter_invalid",
     "arrival_date[gt][x]"),
    ("arrival-date-on-transactions", f"{BTS}?arrival_date=1", 400, "parameter_unknown",
     "arrival_date"),
    ("payout-NUL", f"{BTS}?payout=po_%00", 400, "resource_missing", "payout"),
    ("payout-too-long", f"{BTS}?payout=" + "p" * 65, 400, "resource_missing", "payout"),
    ("payout-array", f"{BTS}?payout[]=po_usd", 400, "parameter_invalid", "payout[]"),
    ("source-NUL", f"{BTS}?source=%00", 400, "resource_missing", "source"),
    ("source-hash", f"{BTS}?source[id]=ch_usd", 400, "parameter_invalid", "source[id]"),
    ("type-unknown", f"{BTS}?type=bogus", 400, "parameter_invalid", "type"),
    ("type-NUL", f"{BTS}?type=refund%00", 400, "parameter_invalid", "type"),
    ("type-array", f"{BTS}?type[]=refund", 400, "parameter_invalid", "type[]"),
    ("type-twice", f"{BTS}?type=refund&type=charge", 400, "parameter_invalid", "type"),
    ("currency-four-letters", f"{BTS}?currency=usdd", 400, "parameter_invalid", "currency"),
    ("currency-unknown", f"{BTS}?currency=zzz", 400, "parameter_invalid", "currency"),
    ("currency-NUL", f"{BTS}?currency=us%00", 400, "parameter_invalid", "currency"),
    ("currency-fullwidth", f"{BTS}?currency=%EF%BD%95sd", 400, "parameter_invalid", "currency"),
    ("status-unknown", "/v1/payouts?status=done", 400, "parameter_invalid", "status"),
    ("status-NUL", "/v1/payouts?status=paid%00", 400, "parameter_invalid", "status"),
    ("status-on-transactions", f"{BTS}?status=paid", 400, "parameter_unknown", "status"),
    ("destination", "/v1/payouts?destination=ba_1", 400, "parameter_unknown", "destination"),
    ("payout-on-payouts", "/v1/payouts?payout=po_usd", 400, "parameter_unknown", "payout"),
    ("cursor-unknown", f"{BTS}?starting_after=txn_nope", 400, "resource_missing",
     "starting_after"),
    ("cursor-of-a-payout", f"{BTS}?ending_before=po_usd", 400, "resource_missing",
     "ending_before"),
    ("cursor-NUL", "/v1/payouts?starting_after=po_%00", 400, "resource_missing",
     "starting_after"),
    ("both-cursors", "/v1/payouts?starting_after=a&ending_before=b", 400,
     "parameters_exclusive", NO_PARAM),
    ("expand-source", f"{BTS}?expand[]=data.source", 400, "parameter_invalid", "expand"),
    ("retrieve-expand", f"{BTS}/txn_charge_usd?expand[]=source", 400, "parameter_invalid",
     "expand"),
    ("retrieve-limit", "/v1/payouts/po_usd?limit=1", 400, "parameter_unknown", "limit"),
    ("retrieve-unknown-param-first", "/v1/payouts/po_nope?status=paid", 400,
     "parameter_unknown", "status"),
]
# fmt: on


@pytest.mark.django_db
@pytest.mark.parametrize("row", REFUSED, ids=lambda row: row[0])
def test_refused_in_the_envelope_and_nothing_written(client, api_key, books, row):
    _, path, status, code, param = row
    before = (rows_written(), books_as_they_are())
    client.raise_request_exception = False  # a 500 must show up as a response here

    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {api_key}")

    assert response.status_code == status, response.content[:300]
    error = response.json()["error"]
    assert (error["type"], error["code"], error.get("param")) == (
        "invalid_request_error",
        code,
        param,
    ), error
    assert response["Request-Id"].startswith("req_")
    assert (rows_written(), books_as_they_are()) == before


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["post", "delete", "put", "patch"])
@pytest.mark.parametrize(
    "path", [BTS, f"{BTS}/txn_charge_usd", "/v1/payouts", "/v1/payouts/po_usd"]
)
def test_nothing_is_written_through_them(api, books, method, path):
    before = books_as_they_are()

    response = getattr(api, method)(
        path, "amount=1", content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert books_as_they_are() == before


@pytest.mark.django_db(transaction=True)
class TestThroughTheStripePackage:
    def test_a_payouts_transactions_page_by_page(self, stripe_client):
        books = a_few_days_of_books()

        listed = stripe_client.v1.balance_transactions.list(
            params={"payout": books.payout, "limit": 1}
        )
        walked = [bt.id for bt in listed.auto_paging_iter()]
        payouts = stripe_client.v1.payouts.list(params={"limit": 2}).auto_paging_iter()
        fetched = stripe_client.v1.balance_transactions.retrieve("txn_refund_usd")
        paid = stripe_client.v1.payouts.retrieve(books.payout)

        assert walked == books.paid_out
        assert [p.id for p in payouts] == books.payouts
        assert isinstance(fetched, stripe.BalanceTransaction) and fetched.amount == -2_500
        assert isinstance(paid, stripe.Payout)
        assert (paid.amount, paid.balance_transaction, paid.destination) == (
            7_180,
            "txn_payout_usd",
            None,
        )

    def test_filters_as_the_package_sends_them(self, stripe_client):
        a_few_days_of_books()

        window = stripe_client.v1.balance_transactions.list(
            params={"created": {"gte": T + 10, "lt": T + 30}, "currency": "eur"}
        )
        arriving = stripe_client.v1.payouts.list(
            params={"arrival_date": {"gt": T + 2 * DAY}, "status": "paid"}
        )

        assert [bt.id for bt in window.data] == ["txn_charge_eur"]
        assert [p.id for p in arriving.data] == ["po_blank"]

    def test_refusals_raise_the_packages_errors(self, stripe_client):
        a_few_days_of_books()

        with pytest.raises(stripe.InvalidRequestError) as missing:
            stripe_client.v1.payouts.retrieve("po_nope")
        with pytest.raises(stripe.InvalidRequestError) as bad_type:
            stripe_client.v1.balance_transactions.list(params={"type": "bogus"})

        assert (missing.value.http_status, missing.value.code) == (404, "resource_missing")
        assert (bad_type.value.http_status, bad_type.value.param) == (400, "type")
        assert bad_type.value.code == "parameter_invalid"
