"""Money at the edges: amounts are int minor units inside; Babel knows each currency's exponent."""

from __future__ import annotations

from decimal import Decimal

from babel.numbers import format_currency, get_currency_precision, is_currency

from ledger_app.errors import InvalidAmount, InvalidCurrency

MAX_AMOUNT = 2**63 - 1  # what a BigIntegerField holds


def validate_amount(amount: object) -> int:
    """Return `amount` if it is a valid amount of minor units; refuse anything else.

    Valid: an `int` (not a `bool`), greater than zero, at most 2**63 - 1. Floats,
    Decimals and strings are refused even when they hold a whole number: the caller
    has to say exactly what it means.
    """
    if type(amount) is not int:  # excludes bool, float, Decimal, str, None
        raise InvalidAmount(
            f"Amount must be a whole number of minor units, not {type(amount).__name__}."
        )
    if amount <= 0:
        raise InvalidAmount(f"Amount must be greater than zero, not {amount}.")
    if amount > MAX_AMOUNT:
        raise InvalidAmount(f"Amount must be at most {MAX_AMOUNT}.")
    return amount


def normalize_currency(currency: object) -> str:
    """Lower-case ISO 4217 code, as stored; unknown codes are refused."""
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isascii():
        raise InvalidCurrency()
    if not is_currency(currency.upper()):
        raise InvalidCurrency(f"Unknown currency {currency!r}.")
    return currency.lower()


def currency_exponent(currency: str) -> int:
    """Digits after the decimal point: usd 2, jpy 0, kwd 3."""
    return get_currency_precision(currency.upper())


def to_major(amount: int, currency: str) -> Decimal:
    """Exact major-unit value of an amount of minor units (1234 usd -> 12.34)."""
    return Decimal(amount).scaleb(-currency_exponent(currency))


def format_money(amount: int, currency: str, locale: str = "en_US") -> str:
    """Human form for display only: $12.34, ¥1,234, KWD 12.345."""
    return format_currency(to_major(amount, currency), currency.upper(), locale=locale)
