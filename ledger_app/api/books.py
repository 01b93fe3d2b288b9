"""/v1/balance_transactions and /v1/payouts: the provider's balance transactions and payouts
as the books mirrored them (sync_provider), listed and retrieved in Stripe's shape. They
are the provider's: read here, never written. Read from the primary (the replica serves
only the reads docs/architecture.md names)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Model, Q
from rest_framework.request import Request
from rest_framework.response import Response

from ledger_app.api.params import (
    BalanceTransactionListParams,
    PayoutListParams,
    RetrieveParams,
)
from ledger_app.api.shared import checked_params, listing, object_or_404, read_schema, rendered
from ledger_app.api.versions import StripeView, version_of
from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.paging import created_in
from ledger_app.rendering.books import (
    BalanceTransactionListSerializer,
    BalanceTransactionSerializer,
    PayoutListSerializer,
    PayoutSerializer,
)

if TYPE_CHECKING:
    from ledger_app.api.shared import SerializerClass

BALANCE_TRANSACTIONS_URL = "/v1/balance_transactions"
PAYOUTS_URL = "/v1/payouts"
# The filters a list of balance transactions takes, each the field of the same name.
BALANCE_TRANSACTION_FILTERS = ("payout", "type", "source", "currency")


class BalanceTransactionsView(StripeView):
    path_param = None  # an unknown cursor is a 400 naming it

    @read_schema(
        "balance_transactions_list",
        BalanceTransactionListSerializer,
        BalanceTransactionListParams,
    )
    def get(self, request: Request) -> Response:
        """The provider's balance transactions as the books mirrored them, newest first."""
        params = checked_params(BalanceTransactionListParams, request.query_params)
        moved = BalanceTransaction.objects.filter(
            created_in(params.get("created"), field="created"),
            **{name: params[name] for name in BALANCE_TRANSACTION_FILTERS if name in params},
        )
        return listing(
            request, moved, params, BalanceTransactionSerializer, BALANCE_TRANSACTIONS_URL
        )


class BalanceTransactionView(StripeView):
    path_param = "balance_transaction"

    @read_schema("balance_transactions_retrieve", BalanceTransactionSerializer, RetrieveParams)
    def get(self, request: Request, balance_transaction_id: str) -> Response:
        """One of the provider's balance transactions, by its id (txn_...)."""
        return shown(
            request, BalanceTransaction, balance_transaction_id, BalanceTransactionSerializer
        )


class PayoutsView(StripeView):
    path_param = None

    @read_schema("payouts_list", PayoutListSerializer, PayoutListParams)
    def get(self, request: Request) -> Response:
        """The provider's payouts as the books mirrored them, newest first."""
        params = checked_params(PayoutListParams, request.query_params)
        paid = Payout.objects.filter(
            created_in(params.get("created"), field="created"),
            created_in(params.get("arrival_date"), field="arrival_date"),
        )
        if "status" in params:
            paid = paid.filter(shown_status(params["status"]))
        return listing(request, paid, params, PayoutSerializer, PAYOUTS_URL)


class PayoutView(StripeView):
    path_param = "payout"

    @read_schema("payouts_retrieve", PayoutSerializer, RetrieveParams)
    def get(self, request: Request, payout_id: str) -> Response:
        """One of the provider's payouts, by its id (po_...)."""
        return shown(request, Payout, payout_id, PayoutSerializer)


def shown(
    request: Request, model: type[Model], object_id: str, serializer_class: SerializerClass
) -> Response:
    """One object by the id in its URL, from the primary; its only parameter expand[],
    which nothing here takes."""
    asked: set[str] = checked_params(RetrieveParams, request.query_params).get("expand", set())
    name = str(model._meta.verbose_name)
    found = object_or_404(model, object_id, name)
    return Response(rendered(found, serializer_class, asked, version_of(request)))


def shown_status(status: str) -> Q:
    """Payouts whose `status` the API shows as `status` (a payout listed without one is
    shown as paid)."""
    return Q(status__in=(status, "")) if status == "paid" else Q(status=status)
