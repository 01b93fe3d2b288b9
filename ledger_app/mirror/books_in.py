"""The provider's balance transactions and payouts, as sync_provider lists them: each value
checked here (outside input), then kept by the books (ledger_app/books/services.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger_app.books import services as books
from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.errors import LedgerError
from ledger_app.mirror.objects import Applied, created_of, id_of, is_id, lower, shown, text
from ledger_app.money import normalize_currency

BIGINT = 2**63
MAX_TYPE = 64  # BalanceTransaction.type's column


def apply_balance_transaction(obj: dict[str, Any]) -> Applied:
    seen = read_balance_transaction(obj)
    if isinstance(seen, str):
        return Applied(f"ignored: {seen}", True)
    moved = books.record_balance_transactions([seen])
    return Applied(
        f"balance transaction {seen.id}: {'kept' if moved else 'known'}", moved=moved > 0
    )


def apply_payout(obj: dict[str, Any], paid: list[Any]) -> Applied:
    """A payout, and the balance transactions the provider says it paid out (`paid`)."""
    seen = read_payout(obj)
    if isinstance(seen, str):
        return Applied(f"ignored: {seen}", True)
    listed = [read_balance_transaction(item) for item in paid]
    bad = next((why for why in listed if isinstance(why, str)), None)
    if bad is not None:
        return Applied(f"ignored: payout {seen.id}: {bad}", True)
    kept = [item for item in listed if isinstance(item, BalanceTransaction)]
    moved = books.record_payout(seen, kept)
    return Applied(f"payout {seen.id}: {len(kept)} balance transactions", moved=moved)


def read_balance_transaction(obj: Any) -> BalanceTransaction | str:
    """The provider's balance transaction, unsaved, or why it is not one."""
    said = obj.get("object") if isinstance(obj, dict) else obj
    if said != "balance_transaction":
        return f"{shown(said)} is not a balance transaction"
    bt_id = obj.get("id")
    if not is_id(bt_id):
        return f"balance transaction id {shown(bt_id)} is not an id"
    amounts = {name: obj.get(name) for name in ("amount", "fee", "net")}
    if any(type(value) is not int or abs(value) >= BIGINT for value in amounts.values()):
        return f"balance transaction {bt_id} has an amount, fee or net that is not one"
    source = id_of(obj.get("source"))
    if source is not None and not is_id(source):
        return f"balance transaction {bt_id}'s source {shown(source)} is not an id"
    currency, created = _currency(obj.get("currency")), created_of(obj)
    available_on = created_of({"created": obj.get("available_on")})
    if currency is None or created is None or available_on is None:
        return f"balance transaction {bt_id} has a currency or a time that is not one"
    kind = obj.get("type")
    if not is_id(kind) or len(kind) > MAX_TYPE:
        return f"balance transaction {bt_id}'s type {shown(kind)} is not one"
    return BalanceTransaction(
        id=bt_id,
        type=kind,
        reporting_category=text(obj.get("reporting_category"), 64),
        source=source or "",
        amount=amounts["amount"],
        fee=amounts["fee"],
        net=amounts["net"],
        currency=currency,
        description=text(obj.get("description"), 1000),
        status=text(obj.get("status"), 16),
        created=created,
        available_on=available_on,
    )


def read_payout(obj: dict[str, Any]) -> Payout | str:
    payout_id, amount = obj.get("id"), obj.get("amount")
    if not is_id(payout_id):
        return f"payout id {shown(payout_id)} is not an id"
    if type(amount) is not int or abs(amount) >= BIGINT:
        return f"payout {payout_id}'s amount {shown(amount)} is not one"
    currency, created = _currency(obj.get("currency")), created_of(obj)
    arrival: datetime | None = created_of({"created": obj.get("arrival_date")})
    moved = id_of(obj.get("balance_transaction"))
    if currency is None or created is None or arrival is None:
        return f"payout {payout_id} has a currency or a time that is not one"
    if moved is not None and not is_id(moved):
        return f"payout {payout_id}'s balance transaction {shown(moved)} is not an id"
    return Payout(
        id=payout_id,
        amount=amount,
        currency=currency,
        arrival_date=arrival,
        created=created,
        status=text(obj.get("status"), 32),
        automatic=obj.get("automatic") is not False,
        method=text(obj.get("method"), 32),
        type=text(obj.get("type"), 32),
        description=text(obj.get("description"), 1000),
        balance_transaction=moved or "",
    )


def _currency(value: Any) -> str | None:
    """A currency code we know (money.normalize_currency), else None."""
    try:
        return normalize_currency(lower(value))
    except LedgerError:
        return None
