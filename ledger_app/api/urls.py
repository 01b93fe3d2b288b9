from django.urls import path, re_path

from ledger_app.api import books, charges, events, payment_intents, refunds, webhook_endpoints
from ledger_app.api.docs import DocsView, SchemaView
from ledger_app.api.errors import not_found

urlpatterns = [
    path("charges", charges.ChargesView.as_view(), name="charges"),
    path("charges/<str:charge_id>", charges.ChargeView.as_view(), name="charge"),
    path(
        "charges/<str:charge_id>/refunds",
        refunds.ChargeRefundsView.as_view(),
        name="charge-refunds",
    ),
    path("refunds", refunds.RefundsView.as_view(), name="refunds"),
    path("refunds/<str:refund_id>", refunds.RefundView.as_view(), name="refund"),
    path(
        "refunds/<str:refund_id>/cancel",
        refunds.RefundCancelView.as_view(),
        name="refund-cancel",
    ),
    path(
        "payment_intents/<str:intent_id>",
        payment_intents.PaymentIntentView.as_view(),
        name="payment-intent",
    ),
    path("events", events.EventsView.as_view(), name="events"),
    path("events/<str:event_id>", events.EventView.as_view(), name="event"),
    *webhook_endpoints.urlpatterns,
    path(
        "balance_transactions",
        books.BalanceTransactionsView.as_view(),
        name="balance-transactions",
    ),
    path(
        "balance_transactions/<str:balance_transaction_id>",
        books.BalanceTransactionView.as_view(),
        name="balance-transaction",
    ),
    path("payouts", books.PayoutsView.as_view(), name="payouts"),
    path("payouts/<str:payout_id>", books.PayoutView.as_view(), name="payout"),
    path("openapi.json", SchemaView.as_view(), name="openapi"),
    path("docs", DocsView.as_view(url_name="openapi"), name="api-docs"),
    re_path(r"^[\s\S]*$", not_found),  # [\s\S]: a %0A in the path is unknown too
]
