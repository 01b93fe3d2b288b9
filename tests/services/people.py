"""Staff, their groups and refund limits, and what the provider was asked: for the limits
and approvals tests."""

from __future__ import annotations

from django.contrib.auth.models import Group

from ledger_app.models import Refund, RefundLimit
from simulated_provider.models import ProviderRequest


def staff(django_user_model, username: str, *groups: Group):
    """A staff member with no usable password (hashing one costs time and proves nothing)."""
    user = django_user_model.objects.create_user(username, is_staff=True)
    user.groups.add(*groups)
    return user


def set_limit(*, currency: str = "usd", per_refund=None, per_day=None, **subject) -> RefundLimit:
    """The limit of one group, user or api_key in one currency (blank: unlimited)."""
    return RefundLimit.objects.create(
        currency=currency, per_refund=per_refund, per_day=per_day, **subject
    )


def provider_contact(refund: Refund) -> list[str]:
    """Every request that reached the provider about this refund (sends and lookups)."""
    return list(
        ProviderRequest.objects.filter(idempotency_key=refund.provider_idempotency_key)
        .order_by("id")
        .values_list("operation", flat=True)
    )
