"""What an admin list may be filtered, searched, ordered and exported by: the lookups its own
filters, search and date hierarchy use, and never a field that holds a secret or a hash."""

from __future__ import annotations

import logging
import re
from contextlib import nullcontext
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.widgets import url_params_from_lookup_dict
from django.core import checks
from django.core.exceptions import FieldDoesNotExist
from django.db import DataError, connections, models, transaction
from django.db.models.constants import LOOKUP_SEP
from django.db.models.expressions import Expression
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from ledger_app.mixin_bases import ChangeListMixin, ModelAdminMixin

if TYPE_CHECKING:
    from django.contrib.admin.views.main import ChangeList

log = logging.getLogger("ledger_app.admin.lookups")

# Fields that hold a secret or a hash, by model label. A field whose class says
# `holds_secret = True` (ledger_app.encryption.EncryptedSecretField) is one too, and so is
# any field or lookup part whose name says it is one (SECRET_NAME), so a new one is guarded
# before anyone lists it here.
SECRET_FIELDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("auth.User", "password"),
        ("ledger_app.ApiKey", "secret_hash"),
        ("ledger_app.WebhookEndpoint", "secret"),
        ("otp_totp.TOTPDevice", "key"),
        ("sessions.Session", "session_data"),
    }
)
SECRET_NAME = re.compile(r"password|secret|hash|token|session_data", re.IGNORECASE)
SEARCH_PREFIXES = "^=@"  # ModelAdmin.search_fields: startswith, exact, full text


def is_secret(field: Any) -> bool:
    if getattr(field, "holds_secret", False):
        return True
    name = getattr(field, "name", "") or ""
    model = getattr(field, "model", None)
    if model is not None and (model._meta.label, name) in SECRET_FIELDS:
        return True
    return not field.is_relation and bool(SECRET_NAME.search(name))


def touches_secret(model: type[models.Model], lookup: str) -> bool:
    """Whether a lookup, search field or ordering ("endpoint__secret__startswith",
    "-user__password", "^name") reads a secret anywhere along its path."""
    parts = lookup.lstrip("-" + SEARCH_PREFIXES).split(LOOKUP_SEP)
    if any(SECRET_NAME.search(part) for part in parts):
        return True
    opts = model._meta
    for part in parts:
        try:
            field = opts.pk if part == "pk" else opts.get_field(part)
        except FieldDoesNotExist:
            return False  # a transform or a lookup type (exact, regex, year): past the fields
        if is_secret(field):
            return True
        if not field.is_relation or field.related_model is None:
            return False
        opts = cast(type[models.Model], field.related_model)._meta  # not "self": resolved
    return False


def ordering_touches_secret(model: type[models.Model], order: Expression | str) -> bool:
    """An ordering entry: a name ("-created_at", "?") or an expression (F, OrderBy)."""
    if isinstance(order, str):
        return order != "?" and touches_secret(model, order)
    expressions = order.flatten() if hasattr(order, "flatten") else [order]
    return any(
        isinstance(part, models.F) and touches_secret(model, part.name) for part in expressions
    )


class RefusedLookup(IncorrectLookupParameters):
    """A query string lookup that no filter of the list declares."""


class GuardedChangeList(ChangeListMixin):
    """Mixed into an admin's ChangeList (LookupGuard.get_changelist): what is left of the query
    string once the list's filters and date hierarchy took theirs is refused, not run as a
    raw lookup; no ordering reads a secret; a value the database cannot take is a bad filter."""

    def get_filters(
        self, request: HttpRequest
    ) -> tuple[list[admin.ListFilter], bool, dict[str, bool | str], bool, bool]:
        specs, has_filters, remaining, duplicates, active = super().get_filters(request)
        undeclared = sorted(key for key in remaining if key not in self.declared_remaining())
        if undeclared:
            raise RefusedLookup(f"Filtering by {', '.join(undeclared)} is not offered here")
        return specs, has_filters, remaining, duplicates, active

    def declared_remaining(self) -> set[str]:
        """Lookups a list may run besides its filters' own: the bounds its date hierarchy
        makes of year/month/day, the lookups our pages link to it with, and the ones Django's
        related-object popups pass (limit_choices_to)."""
        declared = set(getattr(self.model_admin, "linked_lookups", ()))
        hierarchy = self.date_hierarchy
        if hierarchy and f"{hierarchy}__year" in self.filter_params:
            declared |= {f"{hierarchy}__gte", f"{hierarchy}__lt"}
        for fk_lookup in self.model._meta.related_fkey_lookups:
            declared |= set(
                url_params_from_lookup_dict(fk_lookup() if callable(fk_lookup) else fk_lookup)
            )
        return declared

    def get_ordering(
        self, request: HttpRequest, queryset: models.QuerySet
    ) -> list[Expression | str]:
        ordering = super().get_ordering(request, queryset)
        kept = [order for order in ordering if not ordering_touches_secret(self.model, order)]
        if len(kept) < len(ordering) and not {"pk", "-pk"} & set(kept):
            kept.append("-pk")  # still one deterministic order
        return kept

    def get_results(self, request: HttpRequest) -> None:
        # A value the database refuses (a number out of range, a malformed pattern) is a bad
        # filter. Inside a transaction, a savepoint keeps the failure from poisoning it.
        alias = self.queryset.db
        in_transaction = connections[alias].in_atomic_block
        try:
            with transaction.atomic(using=alias) if in_transaction else nullcontext():
                super().get_results(request)
        except DataError as exc:
            raise IncorrectLookupParameters(exc) from exc


@cache
def guarded_changelist(changelist_class: type) -> type:
    if issubclass(changelist_class, GuardedChangeList):
        return changelist_class
    return type(f"Guarded{changelist_class.__name__}", (GuardedChangeList, changelist_class), {})


class LookupGuard(ModelAdminMixin):
    """Mixed into every registered admin (ReadOnlyAdmin, and the site's `register` for the
    rest: backoffice/admin_site.py): a list answers only the lookups its filters, date
    hierarchy and `linked_lookups` use, and nothing reads a secret. Anything else gets
    Django's own answer to a bad filter, the list without filters and "?e=1"; never a
    count, never a 500."""

    # Lookups our own pages link to this list with, that no filter in its sidebar offers
    # (the charge page's "all refunds of this charge": charge__id__exact).
    linked_lookups: tuple[str, ...] = ()

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Every query string lookup passes here, the filters' own included.
        if touches_secret(self.model, lookup):
            return False
        return super().lookup_allowed(lookup, value, request)

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        return [f for f in super().get_search_fields(request) if not touches_secret(self.model, f)]

    def get_ordering(self, request: HttpRequest) -> list[str]:
        ordering = super().get_ordering(request) or ()
        return [order for order in ordering if not ordering_touches_secret(self.model, order)]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A NUL in a filter, lookup or search is nothing any row could match, and PostgreSQL
        # refuses it outright: 400 rather than let it reach the database.
        if any("\x00" in value for _, values in request.GET.lists() for value in values):
            return HttpResponseBadRequest("Filter values must not contain NUL characters.")
        return super().changelist_view(request, extra_context)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        # As a plain `type`: mypy takes a type[ChangeList] for no Hashable, @cache's key.
        changelist_class: type = super().get_changelist(request, **kwargs)
        return guarded_changelist(changelist_class)

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)
        except (DisallowedModelAdminLookup, RefusedLookup) as exc:
            # The lookup's name only: its value may be someone's guess at a secret.
            log.warning(
                "admin lookup refused: user=%s list=%s %s",
                request.user.get_username(),
                self.opts.label,
                exc,
            )
            raise IncorrectLookupParameters(exc) from exc


@cache
def guarded_admin_class(admin_class: type) -> type:
    """`admin_class` with LookupGuard first in its MRO (itself, when it has it already)."""
    if issubclass(admin_class, LookupGuard):
        return admin_class
    attrs = {"__module__": admin_class.__module__, "__doc__": admin_class.__doc__}
    guarded = type(admin_class.__name__, (LookupGuard, admin_class), attrs)
    guarded.__qualname__ = admin_class.__qualname__
    return guarded


def secret_declarations(model_admin: admin.ModelAdmin[Any]) -> list[str]:
    """What an admin declares that would read a secret: filters, search, ordering, date
    hierarchy, linked lookups, CSV columns."""
    model = model_admin.model
    named: list[tuple[str, object]] = []
    for item in model_admin.list_filter:
        if isinstance(item, (list, tuple)):
            named.append(("list_filter", item[0]))
        elif isinstance(item, str):
            named.append(("list_filter", item))
        elif isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
            named.append(("list_filter", item.parameter_name))
    named += [("search_fields", name) for name in model_admin.search_fields]
    named += [("ordering", name) for name in model_admin.ordering or ()]
    named += [("linked_lookups", name) for name in getattr(model_admin, "linked_lookups", ())]
    named += [("export_columns", name) for name in getattr(model_admin, "export_columns", ())]
    if model_admin.date_hierarchy:
        named.append(("date_hierarchy", model_admin.date_hierarchy))
    return [
        f"{where}: {name}"
        for where, name in named
        if isinstance(name, str) and touches_secret(model, name)
    ]


@checks.register(checks.Tags.admin)
def check_admin_lookups(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """`manage.py check`: every registered admin has LookupGuard and declares no secret."""
    return lookup_problems(admin.site)


def lookup_problems(site: admin.AdminSite) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for model, model_admin in site._registry.items():
        if not isinstance(model_admin, LookupGuard):
            errors.append(
                checks.Error(
                    f"The admin of {model._meta.label} has no LookupGuard: its lists would "
                    "answer any lookup on any field.",
                    hint="Register it after ledger_app.admin, or through admin.site.register.",
                    obj=model_admin,
                    id="ledger_app.E101",
                )
            )
        for declared in secret_declarations(model_admin):
            errors.append(
                checks.Error(
                    f"The admin of {model._meta.label} reads a secret ({declared}).",
                    hint="Secrets and hashes are never filtered, searched, ordered or exported.",
                    obj=model_admin,
                    id="ledger_app.E102",
                )
            )
    return errors
