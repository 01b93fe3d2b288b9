"""Refund limits per staff member or API key, and the admin's views of refunds that
wait for a second person or for attention (proxies of Refund)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger_app.refunds.models import Refund


class RefundApproval(Refund):
    """Refunds over their requester's limit, waiting for another person to decide."""

    class Meta:
        proxy = True
        verbose_name = "refund awaiting approval"
        verbose_name_plural = "refunds awaiting approval"


class RefundLimit(models.Model):
    """In one currency, the most one refund may be and the most one requester may refund in
    a day (UTC) without another person's approval, for a group, a user or an API key. A
    user's own limit wins over their groups'; among several groups the highest counts.
    Blank: no limit of that kind. No row at all: no limit (refunds go straight through);
    rows in other currencies only: every refund in this one waits for approval, unless
    REFUND_LIMIT_OTHER_CURRENCIES=allow (services/limits.py:limits_in)."""

    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        "ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="limits"
    )
    currency = models.CharField(max_length=3, help_text="Lower-case ISO 4217 code, e.g. usd.")
    per_refund = models.BigIntegerField(
        null=True, blank=True, help_text="Minor units: the most one refund may be."
    )
    per_day = models.BigIntegerField(
        null=True, blank=True, help_text="Minor units: the most one requester may refund a day."
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(group__isnull=False, user__isnull=True, api_key__isnull=True)
                    | Q(group__isnull=True, user__isnull=False, api_key__isnull=True)
                    | Q(group__isnull=True, user__isnull=True, api_key__isnull=False)
                ),
                name="refundlimit_one_subject",
            ),
            models.CheckConstraint(
                condition=(Q(per_refund__isnull=True) | Q(per_refund__gt=0))
                & (Q(per_day__isnull=True) | Q(per_day__gt=0)),
                name="refundlimit_positive",
            ),
            models.UniqueConstraint(fields=["group", "currency"], name="refundlimit_group"),
            models.UniqueConstraint(fields=["user", "currency"], name="refundlimit_user"),
            models.UniqueConstraint(fields=["api_key", "currency"], name="refundlimit_api_key"),
        ]

    def __str__(self) -> str:
        subject = self.group or self.user or self.api_key
        return f"{subject} ({self.currency.upper()})"


class RefundAttention(Refund):
    """Refunds support should look at: unknown, failed, or pending with no dispatcher."""

    class Meta:
        proxy = True
        verbose_name = "refund needing attention"
        verbose_name_plural = "refunds needing attention"
