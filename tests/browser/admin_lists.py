"""Every admin list the browser tests open, with the columns each must show."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse


@dataclass(frozen=True)
class AdminList:
    model: str  # "app_model", as in the admin's URL names
    columns: tuple[str, ...]  # what an agent needs to act, all on screen at 1280 px
    phone_first: tuple[str, ...]  # on screen at 390 px without scrolling the table

    @property
    def url(self) -> str:
        return reverse(f"admin:{self.model}_changelist")


LISTS = [
    AdminList(
        "ledger_app_charge",
        (
            "id_display",
            "status",
            "amount_and_refunded",
            "refundable_display",
            "created_at",
            "customer_and_description",
        ),
        ("id_display", "status"),
    ),
    AdminList(
        "ledger_app_refund",
        (
            "id",
            "status",
            "amount_display",
            "charge_display",
            "created_at",
            "actor_display",
        ),
        ("id", "status"),
    ),
    AdminList(
        "ledger_app_refundattention",
        (
            "id",
            "status",
            "amount_display",
            "detail_display",
            "dispatch_attempts",
            "created_at",
        ),
        ("id", "status"),
    ),
    AdminList(
        "ledger_app_refundapproval",
        (
            "id",
            "amount_display",
            "requester",
            "reason",
            "expires",
            "charge_display",
            "created_at",
        ),
        ("id", "amount_display"),
    ),
    AdminList(
        "ledger_app_ledgerentry",
        (
            "id",
            "kind",
            "amount_display",
            "delta_display",
            "charge_and_refund",
            "created_at",
            "actor_display",
        ),
        ("id", "kind"),
    ),
    AdminList(
        "ledger_app_idempotencyrecord",
        ("key_display", "operation", "refund_display", "charge_display", "created_at"),
        ("key_display",),
    ),
    AdminList(
        "ledger_app_apikey",
        ("name_display", "prefix", "read_only", "created_at", "revoked_at"),
        ("name_display", "prefix"),
    ),
    AdminList(
        "ledger_app_refundlimit",
        ("subject", "currency_display", "per_refund_display", "per_day_display"),
        ("subject",),
    ),
    AdminList(
        "ledger_app_event",
        ("id", "type", "created_at", "charge_display", "refund_display"),
        ("id",),
    ),
    AdminList(
        "ledger_app_webhookendpoint",
        ("id", "url_display", "status", "events_display", "created_at"),
        ("id",),
    ),
    AdminList(
        "ledger_app_webhookdelivery",
        (
            "id",
            "status",
            "event_type",
            "attempts",
            "last_answer",
            "next_attempt_at",
            "created_at",
        ),
        ("id", "status", "event_type"),
    ),
    AdminList(
        "ledger_app_booksday",
        (
            "day_display",
            "currency_display",
            "refunded_display",
            "matched_display",
            "differences_display",
            "status",
            "closed_at",
        ),
        ("day_display", "currency_display"),
    ),
    AdminList(
        "ledger_app_booksdifference",
        (
            "day_display",
            "kind",
            "refund_and_charge",
            "amounts",
            "balance_transaction_cell",
            "explained_display",
        ),
        ("day_display", "kind"),
    ),
    AdminList(
        "axes_accessattempt",
        ("attempt_time", "username_display", "address", "failures", "path"),
        ("attempt_time", "username_display"),
    ),
    AdminList(
        "auth_user",
        ("username_display", "email_display", "name", "is_staff", "is_active"),
        ("username_display",),
    ),
]
