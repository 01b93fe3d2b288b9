"""CSV export of an admin list: every row the person's filters, search and ordering select
(not one page of them), streamed so that a million rows cost the same memory as a hundred."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator, Iterable, Iterator
from datetime import UTC
from functools import partial

from django.contrib.admin.exceptions import DisallowedModelAdminLookup, DisallowedModelAdminToField
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, PAGE_VAR, ChangeList
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import DatabaseError, models
from django.http import HttpResponse, HttpResponseNotAllowed, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import path
from django.utils import timezone
from django.utils.text import slugify

from ledger_app.admin.lookups import touches_secret
from ledger_app.csv_files import csv_writer
from ledger_app.db import connection_lost, streamed
from ledger_app.mixin_bases import ModelAdminMixin
from ledger_app.money import format_money
from ledger_app.replica import ListsFromReplica, stale_ok

log = logging.getLogger("ledger_app.admin")

CHUNK_SIZE = 2_000  # rows fetched from the database at a time
LINES_PER_WRITE = 500  # CSV lines joined into one piece of the response
FORMATTED = "_formatted"  # "amount_formatted": the column before it, as money

Cell = Callable[[tuple], object]  # one column's cell from a fetched row


class CsvExport(ModelAdminMixin):
    """For a ModelAdmin: `<model>/export.csv` streams the changelist as CSV, and the list
    offers "Export CSV" (templates/admin/ledger_app/change_list.html) to those who may.

    `export_columns` names the columns in order: model fields (a foreign key gives the
    related id, or the username for a user), and `<money field>_formatted` for a money
    field shown in the row's currency. The rows are the ChangeList's own queryset, so
    filters, search and ordering are exactly the list's; a list that reads the replica
    (ListsFromReplica) exports from it too. Exporting needs the list's view permission and
    `<app>.export_<model>` (of the concrete model, so the refund queues need export_refund).
    """

    export_columns: tuple[str, ...] = ()
    export_chunk_size = CHUNK_SIZE

    def get_urls(self):
        export = path(
            "export.csv",
            self.admin_site.admin_view(self.export_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_export",
        )
        return [export, *super().get_urls()]

    def has_export_permission(self, request) -> bool:
        concrete = (self.opts.concrete_model or self.model)._meta
        return request.user.has_perm(f"{concrete.app_label}.export_{concrete.model_name}")

    def changelist_view(self, request, extra_context=None):
        offered = self.has_export_permission(request)
        return super().changelist_view(request, {**(extra_context or {}), "export_csv": offered})

    def export_view(self, request) -> HttpResponseBase:
        if not (
            self.has_view_or_change_permission(request) and self.has_export_permission(request)
        ):
            raise PermissionDenied
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        if any("\x00" in value for _, values in request.GET.lists() for value in values):
            return refused("Filter values must not contain NUL characters.")
        # Every page, whichever one the list was showing.
        request.GET = request.GET.copy()
        for name in (PAGE_VAR, ERROR_FLAG):
            request.GET.pop(name, None)
        if isinstance(self, ListsFromReplica) and self.lists_from_replica:
            return stale_ok(lambda alias: self._export(request, alias))
        return self._export(request, None)

    def _export(self, request, alias: str | None) -> HttpResponseBase:
        """The response; the first rows are read here, so a replica that fails at once is
        read around (stale_ok). One that fails later cuts the download short."""
        changelist = self._export_changelist(request, alias)
        if isinstance(changelist, HttpResponse):
            return changelist
        lookups, cells = export_plan(self.model, self.export_columns)
        rows = streamed(changelist.queryset.values_list(*lookups), self.export_chunk_size)
        try:
            first = next(rows, None)
        except (DatabaseError, ValueError, IndexError, TypeError) as exc:
            if connection_lost(exc):  # the database's failure, not the filters'
                raise
            # A lookup the database or Django cannot run (id__regex=[, amount__range=1).
            return refused("These filters cannot be read.")
        fetched = rows if first is None else first_then(first, rows)
        return self._csv_download(request, cells, fetched)

    def _export_changelist(self, request, alias: str | None) -> ChangeList | HttpResponse:
        """The list as the person's filters, search and ordering make it (read from `alias`
        when given), or the refusal of filters that do not apply to it."""
        if alias is not None:
            request.ledger_list_alias = alias  # ListsFromReplica.get_queryset reads it
        try:
            return self.get_changelist_instance(request)
        except (
            IncorrectLookupParameters,
            DisallowedModelAdminLookup,
            DisallowedModelAdminToField,
            ValueError,  # a lookup given a value it cannot take (amount__range=1)
            IndexError,
            TypeError,
        ) as exc:
            detail = f" ({exc})" if str(exc) else ""
            return refused(f"These filters do not apply to this list{detail}.")
        finally:
            if alias is not None:
                del request.ledger_list_alias

    def _csv_download(self, request, cells: list[Cell], rows: Iterator[tuple]) -> HttpResponseBase:
        """The rows streamed as a CSV file named after the list and the time, logged as it
        starts."""
        name = slugify(str(self.opts.verbose_name_plural))
        log.info(
            "csv export started: user=%s list=%s query=%r",
            request.user.get_username(),
            name,
            request.GET.urlencode(),
        )
        response = StreamingHttpResponse(
            csv_lines(self.export_columns, cells, rows, name),
            content_type="text/csv; charset=utf-8",
        )
        stamp = timezone.now().astimezone(UTC).strftime("%Y-%m-%dT%H%MZ")
        response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.csv"'
        return response


def refused(reason: str) -> HttpResponse:
    """400, in words, with a stable code; nothing is read or written."""
    return HttpResponse(
        f"{reason} Open the list, choose the filters there and export again. (invalid_filter)",
        status=400,
        content_type="text/plain; charset=utf-8",
    )


def _money_cell(amount: int, currency: int, row: tuple) -> str:
    # A money field that may be empty (a difference's provider amount) stays empty.
    return "" if row[amount] is None else format_money(row[amount], row[currency])


def _converted_cell(at: int, convert: Callable[[object], object], row: tuple) -> object:
    return convert(row[at])


def export_plan(model: type[models.Model], columns: Iterable[str]) -> tuple[list[str], list[Cell]]:
    """What to fetch (values_list lookups) and how each column's cell is made from a row."""
    lookups: list[str] = []

    def position(lookup: str) -> int:
        if lookup not in lookups:
            lookups.append(lookup)
        return lookups.index(lookup)

    cells: list[Cell] = []
    for column in columns:
        if touches_secret(model, column.removesuffix(FORMATTED)):
            # Never in a file that leaves the building (manage.py check says so too).
            raise ImproperlyConfigured(f"{column} holds a secret: it is never exported")
        if column.endswith(FORMATTED):
            amount, currency = position(column.removesuffix(FORMATTED)), position("currency")
            cells.append(partial(_money_cell, amount, currency))
        else:
            lookup, convert = fetched_as(model._meta.get_field(column))
            at = position(lookup)
            cells.append(partial(_converted_cell, at, convert))
    return lookups, cells


def fetched_as(field) -> tuple[str, Callable[[object], object]]:
    """The lookup that fetches a field's value and what makes a cell of it."""
    if field.many_to_one and field.related_model is get_user_model():
        return f"{field.name}__{field.related_model.USERNAME_FIELD}", text
    if isinstance(field, models.DateTimeField):
        return field.name, utc_iso
    if isinstance(field, models.JSONField):
        return field.name, lambda value: text(as_json(value))
    if isinstance(field, models.IntegerField) and not field.choices:
        return field.name, lambda value: value  # a number: stays one, negative ones too
    return field.name, text  # text, choices (their stored value) and related ids


def text(value: object) -> str:
    """A text cell; the writer (services/csv_files.py: csv_writer) defuses formulas in it."""
    return "" if value is None else str(value)


def utc_iso(value) -> str:
    """2026-11-30T19:24:05Z: UTC whatever the settings, to the second."""
    if value is None:
        return ""
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def as_json(value: object) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


class _Line:
    """What the CSV writer writes to: it hands each line back instead of keeping it."""

    def write(self, line: str) -> str:
        return line


def first_then(first: tuple, rows: Generator[tuple, None, None]) -> Generator[tuple, None, None]:
    """The row read ahead, then the rest; closing it closes `rows` (and its transaction)."""
    try:
        yield first
        yield from rows
    finally:
        rows.close()


def csv_lines(
    header: Iterable[str], cells: list[Cell], rows: Iterator[tuple], name: str
) -> Iterator[str]:
    """The CSV, a few hundred lines per piece: a byte order mark (so spreadsheets read it
    as UTF-8), the header, one line per row, every cell quoted and defused (csv_writer).
    Logs how many rows went out, and whether the download finished or stopped (client
    gone, database error)."""
    writer = csv_writer(_Line())
    written = 0
    finished = False
    try:
        lines = ["\ufeff" + writer.writerow(header)]
        for row in rows:
            lines.append(writer.writerow([cell(row) for cell in cells]))
            written += 1
            if len(lines) >= LINES_PER_WRITE:
                yield "".join(lines)
                lines = []
        yield "".join(lines)
        finished = True
    finally:
        close = getattr(rows, "close", None)
        if close is not None:  # a streamed read ends its transaction now, not when collected
            close()
        log.info(
            "csv export %s: list=%s rows=%d", "finished" if finished else "stopped", name, written
        )
