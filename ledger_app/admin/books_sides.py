"""A difference with the provider as the admin's pages show it: the ledger's side (the refund,
the charge, the amount the ledger moved) beside the provider's (its balance transaction: type,
amount, fee, payout), each linking to its own admin page."""

from __future__ import annotations

from django.contrib.admin.utils import quote
from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse
from django.utils.html import format_html

from ledger_app.admin.base import clipped
from ledger_app.books.models import BalanceTransaction, BooksDifference
from ledger_app.money import format_money

# What is shown of a difference's balance transaction, when the provider listed one
# (annotated as bt_<name> by with_balance_transaction).
FROM_THE_PROVIDER = ("type", "amount", "fee", "currency", "payout")


def with_balance_transaction(rows: QuerySet[BooksDifference]) -> QuerySet[BooksDifference]:
    """Each difference with what the provider listed of its balance transaction, if it did
    (bt_type, bt_amount, ...: a primary key lookup each, for the rows a page shows)."""
    listed = BalanceTransaction.objects.filter(pk=OuterRef("balance_transaction"))
    return rows.annotate(
        **{f"bt_{name}": Subquery(listed.values(name)[:1]) for name in FROM_THE_PROVIDER}
    )


def linked(url_name: str, object_id: str | None) -> str:
    """An id, clipped, linking to its object's admin page; "-" for none."""
    if not object_id:
        return clipped(object_id)
    url = reverse(f"admin:{url_name}", args=[quote(object_id)])
    return format_html('<a href="{}">{}</a>', url, clipped(object_id))


def amounts_of(difference: BooksDifference) -> list[tuple[str, str]]:
    """[("Ledger", "-$20.00"), ("Provider", "none")]: each side's amount, in its own
    currency."""

    def said(amount: int | None, currency: str) -> str:
        return "none" if amount is None else format_money(amount, currency)

    provider_currency = getattr(difference, "bt_currency", None) or difference.currency
    return [
        ("Ledger", said(difference.ledger_amount, difference.currency)),
        ("Provider", said(difference.provider_amount, provider_currency)),
    ]


def provider_side(difference: BooksDifference) -> dict[str, object]:
    """What a template shows of a difference's balance transaction: its id (linked when the
    provider listed it), its type, amount and fee, and its payout (linked), from the bt_
    annotations of with_balance_transaction."""
    bt_id = difference.balance_transaction
    if getattr(difference, "bt_type", None) is None:  # none listed: its id alone, if any
        return {"bt_id": bt_id, "listed": False}
    listed = {name: getattr(difference, f"bt_{name}") for name in FROM_THE_PROVIDER}
    currency = listed["currency"] or difference.currency
    return {
        "bt_id": bt_id,
        "listed": True,
        "bt_link": linked("ledger_app_balancetransaction_change", bt_id),
        "bt_type": listed["type"],
        "bt_amount": format_money(listed["amount"], currency),
        "bt_fee": format_money(listed["fee"], currency),
        "payout_link": linked("ledger_app_payout_change", listed["payout"]),
        "paid_out": bool(listed["payout"]),
    }


def sides(difference: BooksDifference) -> dict[str, object]:
    """Both sides of a difference, for a template: the refund and the charge (linked), each
    side's amount, and the balance transaction (provider_side)."""
    (_, ledger), (_, provider) = amounts = amounts_of(difference)
    return {
        "difference": difference,
        "refund_link": linked("ledger_app_refund_change", difference.refund_id),
        "charge_link": linked("ledger_app_charge_change", difference.charge_id),
        "amounts": amounts,
        "ledger": ledger,
        "provider": provider,
        **provider_side(difference),
    }
