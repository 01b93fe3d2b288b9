"""The list filters and the exact search that several admins share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.cache import cache as django_cache
from django.db.models import Count, Model, Q, QuerySet
from django.http import HttpRequest

from ledger_app.charges.models import Charge
from ledger_app.text import has_unstorable_characters

if TYPE_CHECKING:
    from django.contrib.admin.filters import _ListFilterChoices
    from django.contrib.admin.views.main import ChangeList

M = TypeVar("M", bound=Model)

# What a refund made without a reason (stored as "") is called in filters and the chart.
NO_REASON = "No reason"


class CurrencyFilter(admin.SimpleListFilter):
    """The currencies in use, looked up at most every ten minutes, not on every page."""

    title = "currency"
    parameter_name = "currency"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        currencies: list[str] = (
            django_cache.get_or_set(
                "admin:charge-currencies",
                lambda: list(
                    Charge.objects.order_by().values_list("currency", flat=True).distinct()[:50]
                ),
                600,
            )
            or []
        )
        # The chosen currency is always a choice: a filter with no choices is not applied,
        # and the cached list may predate the first charge in that currency.
        shown = set(currencies)
        if chosen := self.value():
            shown.add(chosen)
        return [(c, c.upper()) for c in sorted(shown)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(currency=self.value()) if self.value() else queryset


class IssuedByFilter(admin.SimpleListFilter):
    """Staff users, not every user ever seen on a refund: no scan of the refunds table."""

    title = "issued by"
    parameter_name = "created_by"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        staff = get_user_model().objects.filter(is_staff=True).order_by("username")[:100]
        return [(str(u.pk), u.get_username()) for u in staff]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and value.isascii() and value.isdigit():
            return queryset.filter(created_by_id=value)
        return queryset


class ReasonFilter(admin.ChoicesFieldListFilter):
    """The reason filter with "No reason" too, for refunds made without one (stored as ""):
    the home page's chart links to them, and the list says so."""

    def get_facet_counts(self, pk_attname: str, filtered_qs: QuerySet[Any]) -> dict[str, Any]:
        counts = super().get_facet_counts(pk_attname, filtered_qs)
        return counts | {"none__c": Count(pk_attname, filter=Q(**{self.lookup_kwarg: ""}))}

    def choices(self, changelist: ChangeList) -> Iterator[_ListFilterChoices]:
        yield from super().choices(changelist)
        title = NO_REASON
        if changelist.add_facets:
            title = f"{title} ({self.get_facet_queryset(changelist)['none__c']})"
        yield {
            "selected": self.lookup_val is not None and "" in self.lookup_val,
            "query_string": changelist.get_query_string(
                {self.lookup_kwarg: ""}, [self.lookup_kwarg_isnull]
            ),
            "display": title,
        }


def exact_id_search(queryset: QuerySet[M], term: str, *fields: str) -> tuple[QuerySet[M], bool]:
    term = term.strip()
    if not term:
        return queryset, False
    if has_unstorable_characters(term) or len(term) > 255:
        return queryset.none(), False
    query = Q()
    for field in fields:
        query |= Q(**{field: term})
    return queryset.filter(query), False
