"""What the /v1/ endpoints share. Each view (charges.py, refunds.py, events.py,
payment_intents.py, webhook_endpoints.py, books.py) checks its parameters with its serializer
(params.py, through checked_params), makes one service or selector call, and renders
through rendered, list_page and created_response here; read_schema and create_schema give
it its OpenAPI schema, idempotency_key reads a create's Idempotency-Key header.

The GETs of charges, refunds and events read the replica when one is configured
(ledger_app/replica.py), falling back to the primary when it fails, and when it lacks an
object asked for by id (a refund retrieved right after it was created is found). Creates,
updates, idempotent replays and API key checks always use the primary."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model, QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from ledger_app import api_versions
from ledger_app.api import expansion
from ledger_app.api.errors import ApiError, card_error_response
from ledger_app.api.fields import MAX_ID_LENGTH, could_be_an_id
from ledger_app.api.params import Params, RetrieveParams, fold
from ledger_app.api.versions import version_of
from ledger_app.charges.models import Charge
from ledger_app.errors import InvalidIdempotencyKey, ResourceMissing
from ledger_app.idempotency.services import (
    RESERVED_KEY_PREFIXES,
    Created,
    refuse_reserved_key,
    validate_key,
)
from ledger_app.paging import page_newest_first
from ledger_app.rendering.fields import ErrorSerializer
from ledger_app.replica import stale_ok

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.serializers import BaseSerializer

    # A serializer class the views render with (rendering/), and what a page's rows may be
    # prepared with before they are (each charge's first refunds, fetched together).
    SerializerClass = type[BaseSerializer[Any]]
    Prepare = Callable[[list[Any], dict[str, Any]], list[Any]]

M = TypeVar("M", bound=Model)
F = TypeVar("F", bound=Callable[..., Any])  # a view method extend_schema decorates

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409, 413, 415, 429)}
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x2b\\x2d-\\x7e]+$"},
    OpenApiParameter.HEADER,
    description="1 to 255 printable ASCII characters (space to ~), no comma, not starting "
    f"with {', '.join(RESERVED_KEY_PREFIXES)} in any case (the back office's own keys); "
    "sent once. Otherwise a 400 invalid_idempotency_key (idempotency_key_reserved for a "
    "reserved prefix). Keys are the API key's own: the same key from another API key is "
    "that client's own request. The same key and request again replays the first result "
    "(header Idempotent-Replayed: true); the same key with another request is a 400 "
    "idempotency_error.",
)
# An Idempotency-Key header is printable ASCII. Clients encode other characters
# differently (Python's http.client sends Latin-1, most others UTF-8) and WSGI hands the
# bytes over as Latin-1, so one key typed twice could arrive as two different keys.
PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DEFAULT_LIMIT = 10


def read_schema(
    operation_id: str,
    response_serializer: SerializerClass,
    params_class: type[Params] | None = None,
) -> Callable[[F], F]:
    """The schema of a GET: its query parameters (from the serializer that checks them)."""
    return extend_schema(
        operation_id=operation_id,
        parameters=[params_class] if params_class else [],
        responses={200: response_serializer, **ERRORS},
    )


def create_schema(
    operation_id: str,
    params_class: type[Params],
    response_serializer: SerializerClass,
    *,
    keyed: bool = True,
) -> Callable[[F], F]:
    """The schema of a POST: a form or JSON body, and (`keyed`, for a create) an
    Idempotency-Key."""
    return extend_schema(
        operation_id=operation_id,
        request={
            "application/x-www-form-urlencoded": params_class,
            "application/json": params_class,
        },
        parameters=[IDEMPOTENCY_KEY] if keyed else [],
        responses={200: response_serializer, **ERRORS},
    )


def checked_params(params_class: type[Params], data: Mapping[str, Any]) -> dict[str, Any]:
    """The request's parameters, folded and checked by the endpoint's serializer."""
    params = fold(params_class, data)
    serializer = params_class(data=params, context={"from_json": params.from_json})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def object_or_404(model: type[M], object_id: str, name: str, using: str = DEFAULT_DB_ALIAS) -> M:
    """The object a URL names; 404 resource_missing when there is none."""
    if could_be_an_id(object_id):
        obj = model._default_manager.using(using).filter(pk=object_id).first()
    else:
        obj = None
    if obj is None:
        raise not_found(object_id, name)
    return obj


def retrieved(
    request: Request,
    model: type[Model],
    object_id: str,
    serializer_class: SerializerClass,
    params_class: type[Params] = RetrieveParams,
) -> Response:
    """A GET of one object by the id in its URL (its only parameter expand[]); from the
    replica if there is one and it has the object, else from the primary."""
    asked = checked_params(params_class, request.query_params).get("expand", set())
    name = model._meta.model_name or ""

    def shown(alias: str) -> dict[str, Any]:
        found = object_or_404(model, object_id, name, alias)
        return rendered(found, serializer_class, asked, version_of(request), alias)

    return Response(stale_ok(shown, missing=(ApiError,)))


def not_found(object_id: str, name: str) -> ApiError:
    """The 404 for an id in the URL that names nothing (whatever the view's other
    parameters would have been refused with)."""
    if not could_be_an_id(object_id):
        message = f"No such object: '{object_id[:MAX_ID_LENGTH]}'"
    else:
        message = f"No such {name}: '{object_id}'"
    return ApiError(message, code="resource_missing", status=404)


def created_response(
    request: Request, result: Created[Any], serializer_class: SerializerClass, asked: set[str]
) -> Response:
    """A create's answer (or its replay), with the expansions `asked`."""
    if isinstance(result.item, Charge) and result.item.status == Charge.Status.FAILED:
        response = card_error_response(result.item)
    else:
        response = Response(rendered(result.item, serializer_class, asked, version_of(request)))
    if result.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def shown_context(own: set[str], version: str) -> dict[str, Any]:
    """What the serializers render by: their own expansions (a charge's refunds) and the
    API version (a charge embeds its refunds before 2022-11-15, or when expanded)."""
    embed = "refunds" in own or api_versions.embeds_refunds(version)
    return {"expand": own, "embed_refunds": embed, "version": version}


def rendered(
    obj: Model,
    serializer_class: SerializerClass,
    asked: set[str],
    version: str,
    using: str = DEFAULT_DB_ALIAS,
) -> dict[str, Any]:
    """One object as the API shows it in `version`, with the expansions `asked`
    (expansion.py)."""
    own = asked & expansion.SERIALIZER_EXPANDS
    data = serializer_class(obj, context=shown_context(own, version)).data
    return expansion.expand([data], asked - own, using, version)[0]


def listing(
    request: Request,
    queryset: QuerySet[Any],
    params: dict[str, Any],
    serializer_class: SerializerClass,
    url: str,
) -> Response:
    """A page of `queryset` as Stripe's list, from the primary."""
    return Response(list_page(queryset, params, serializer_class, url, version_of(request)))


def stale_listing(
    request: Request,
    queryset: QuerySet[Any],
    params: dict[str, Any],
    serializer_class: SerializerClass,
    url: str,
    *,
    prepare: Prepare | None = None,
) -> Response:
    """A page of `queryset` as Stripe's list, from the replica if there is one (it may be a
    moment behind); from the primary if it fails or lacks the page's cursor object."""
    version = version_of(request)
    return Response(
        stale_ok(
            lambda alias: list_page(
                queryset.using(alias), params, serializer_class, url, version, prepare=prepare
            ),
            missing=(ResourceMissing,),
        )
    )


def list_page(
    queryset: QuerySet[Any],
    params: dict[str, Any],
    serializer_class: SerializerClass,
    url: str,
    version: str,
    *,
    prepare: Prepare | None = None,
) -> dict[str, Any]:
    """A page of `queryset`, read from its database, as Stripe's list in the API
    `version`; `prepare` may fetch what the page's rows show along with them (each
    charge's first refunds)."""
    page = page_newest_first(
        queryset,
        limit=params.get("limit", DEFAULT_LIMIT),
        starting_after=params.get("starting_after"),
        ending_before=params.get("ending_before"),
    )
    asked = expansion.of_items(params.get("expand", set()))
    own = asked & expansion.SERIALIZER_EXPANDS
    context = shown_context(own, version)
    items = prepare(page.items, context) if prepare is not None else page.items
    data = serializer_class(items, many=True, context=context).data
    return {
        "object": "list",
        "data": expansion.expand(list(data), asked - own, queryset.db, version),
        "has_more": page.has_more,
        "url": url,
    }


def idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key header, or None without one. Taken first, before
    anything is read or written: a key that is not 1 to 255 printable ASCII characters,
    or holds a comma (servers join a repeated header with one, so a comma may be two
    headers), is refused with `invalid_idempotency_key`; one in a reserved namespace with
    `idempotency_key_reserved`."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if CONTROL.search(key):
        raise InvalidIdempotencyKey(
            "The Idempotency-Key header must not contain control characters."
        )
    if not PRINTABLE_ASCII.fullmatch(key):
        raise InvalidIdempotencyKey(
            "The Idempotency-Key header must be printable ASCII (space to ~). HTTP clients "
            "encode other characters differently, so the same key could arrive as different "
            "keys; send such a key encoded, for example as hex or base64url of its UTF-8."
        )
    if "," in key:
        raise InvalidIdempotencyKey(
            "The Idempotency-Key header was sent more than once, or holds a comma: a repeated "
            "header is refused (servers join repeats with commas, so they cannot be told "
            "apart) and commas are not allowed in a key. Send one header without commas."
        )
    return refuse_reserved_key(validate_key(key))
