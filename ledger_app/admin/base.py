"""Shared admin pieces: read-only by default, amounts in their currency, paging that scales,
the pages admin actions draw."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.functional import cached_property
from django.utils.html import format_html

from ledger_app.admin.lookups import LookupGuard
from ledger_app.admin.second_factor import money_action_gate, take_held_form
from ledger_app.counts import count_of
from ledger_app.money import format_money
from ledger_app.text import has_unstorable_characters

REFUND_PERMISSION = "ledger_app.refund_charge"
# The request attribute an add or change page's held form rides on, from changeform_view
# to get_form (HeldFormAdmin).
HELD_FORM = "held_form"


class LargeTablePaginator(Paginator):
    """Never counts a whole large table.

    Unfiltered on PostgreSQL, the total is the planner's estimate (pg_class.reltuples);
    otherwise counting stops at COUNT_CAP rows, so a page costs the same at a thousand
    rows as at a million.
    """

    COUNT_CAP = 10_000

    @cached_property
    def count(self) -> int:
        queryset = cast(QuerySet, self.object_list)  # the admin pages a queryset
        if connection.vendor == "postgresql" and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] > self.COUNT_CAP:
                return int(row[0])
        return queryset[: self.COUNT_CAP + 1].count()


class HeldFormAdmin(admin.ModelAdmin):
    """An add or change page opened again after the code page draws what was typed into it
    before (second_factor.hold_form), with its errors if any, for the person to check and
    save again: nothing is saved by opening it."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "GET":
            setattr(request, HELD_FORM, take_held_form(request))
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(
        self, request: HttpRequest, obj: Model | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[Any]]:
        form_class = super().get_form(request, obj, change, **kwargs)
        held = getattr(request, HELD_FORM, None)
        if held is None or request.method != "GET":
            return form_class
        # A class made at run time: the type checker knows its base only as a ModelForm.
        base: Any = form_class

        class HeldForm(base):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                if not args and "data" not in kwargs:
                    kwargs["data"] = held
                super().__init__(*args, **kwargs)

        return HeldForm


class ReadOnlyAdmin(LookupGuard, HeldFormAdmin):
    """Nothing here is added, changed or deleted by hand; lists answer only the lookups
    their filters use (lookups.py)."""

    # Actions that can send money to the provider: running or confirming one needs a
    # fresh second factor (second_factor.py).
    money_actions: frozenset[str] = frozenset()
    paginator = LargeTablePaginator
    show_full_result_count = False
    list_per_page = 50

    class Media:
        # Lists and pages fit their window (long ids and text clipped, see clipped()).
        css = {"all": ["ledger_app/admin.css"]}

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Model | None:
        # The change, history and delete pages look their object up here. An id with a NUL
        # (or a lone surrogate) is no row's id, and PostgreSQL refuses a query holding one:
        # 404, rather than a 500 from the database or a redirect saying it was deleted.
        if has_unstorable_characters(object_id):
            raise Http404("No such object.")
        return super().get_object(request, object_id, from_field)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django looks the object up first and redirects when there is none: someone who
        # may not look at these objects would learn which ids exist. Refuse them first.
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return super().history_view(request, object_id, extra_context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A NUL in the query string is refused by LookupGuard.changelist_view (lookups.py).
        return money_action_gate(self, request) or super().changelist_view(request, extra_context)

    def has_refund_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm(REFUND_PERMISSION)

    def page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        """What every admin page of this model needs: the site's context, opts, a title."""
        return {**self.admin_site.each_context(request), "opts": self.opts, "title": title}

    def action_confirmation(
        self,
        request: HttpRequest,
        template: str,
        *,
        title: str,
        form: forms.Form,
        selected: list[Any],
        **context: Any,
    ) -> TemplateResponse:
        """The page an action that needs input draws before it acts: `form` and the
        `selected` objects, posted back by includes/action_confirmation_form.html."""
        return TemplateResponse(
            request,
            template,
            {
                **self.page_context(request, title),
                "form": form,
                "queryset": selected,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
                **context,
            },
        )


# The base of a mixin of ReadOnlyAdmin (mixin_bases.py's kind): ReadOnlyAdmin to the type
# checker, so that the mixin's `self` and `super()` calls are checked against it; `object`
# at run time.
if TYPE_CHECKING:
    ReadOnlyAdminMixin = ReadOnlyAdmin
else:
    ReadOnlyAdminMixin = object


def totals_by_currency(amounts: Iterable[tuple[int, str]]) -> list[tuple[str, str]]:
    """What a confirmation page adds up: (amount, currency) pairs as one formatted total per
    currency, e.g. [("JPY", "¥3,000"), ("USD", "$31.00")]."""
    totals: dict[str, int] = defaultdict(int)
    for amount, currency in amounts:
        totals[currency] += amount
    return [(c.upper(), format_money(t, c)) for c, t in sorted(totals.items())]


def report_grouped(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    lines: dict[Any, list[str]],
    order: list[tuple[Any, int]],
    noun: tuple[str, str],
) -> None:
    """An action's result, one message per outcome in `order` ((outcome, level) pairs):
    the outcome's label, how many of `noun` (singular, plural), then each line:
    "Refunded: 2 charges — ch_1 $5.00 (re_1), ch_2 …"."""
    for outcome, level in order:
        if lines.get(outcome):
            joined = ", ".join(lines[outcome])
            counted = count_of(len(lines[outcome]), *noun)
            model_admin.message_user(request, f"{outcome.label}: {counted} — {joined}", level)


def clipped(text: object, width: str = "id") -> str:
    """Text a list shows on one line, cut short with "…" past its column's width ("id",
    "text" or "wide" in admin.css) rather than widening the table. The whole text stays in
    the page (screen readers and search read it) and shows on hover."""
    text = "" if text is None else str(text)
    if not text:
        return "-"  # what the admin shows for an empty value
    return format_html('<span class="clip clip-{}" title="{}">{}</span>', width, text, text)


def clipped_lines(first: object, second: object, width: str = "text") -> str:
    """Two values in one list cell, one clipped line each (the second quieter): columns
    combined so that a list fits its window. An empty second value leaves one line."""
    if not second:
        return clipped(first, width)
    return format_html(
        '<span class="lines">{}{}</span>', clipped(first, width), clipped(second, width)
    )


class HasAmount(Protocol):
    @property
    def amount(self) -> int: ...
    @property
    def currency(self) -> str: ...


class AmountColumn:
    """An admin for a model with `amount` and `currency`: the amount, formatted."""

    @admin.display(description="Amount", ordering="amount")
    def amount_display(self, obj: HasAmount) -> str:
        return format_money(obj.amount, obj.currency)
