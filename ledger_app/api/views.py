"""The /v1/ endpoints. Each view checks its parameters with its serializer (params.py),
makes one service or selector call, and renders.

The GETs of charges, refunds and events read the replica when one is configured
(ledger_app/replica.py), falling back to the primary when it fails, and when it lacks an
object asked for by id (a refund retrieved right after it was created is found). Creates,
updates, idempotent replays and API key checks always use the primary."""

from __future__ import annotations

import re
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from ledger_app import api_versions
from ledger_app.api import expansion
from ledger_app.api.errors import ApiError, card_error_response
from ledger_app.api.fields import MAX_ID_LENGTH, could_be_an_id
from ledger_app.api.params import (
    ChargeCreateParams,
    ChargeListParams,
    ChargeRefundCreateParams,
    ChargeRetrieveParams,
    EventListParams,
    Params,
    PaymentIntentRetrieveParams,
    RefundCancelParams,
    RefundCreateParams,
    RefundListParams,
    RefundPage,
    RefundRetrieveParams,
    RefundUpdateParams,
    RetrieveParams,
    fold,
)
from ledger_app.api.versions import StripeView, version_of
from ledger_app.approvals.services import cancel_refund
from ledger_app.charges.models import PAYMENT_INTENT_ID, Charge
from ledger_app.charges.selectors import charge_of_payment_intent
from ledger_app.charges.services import create_charge
from ledger_app.errors import InvalidIdempotencyKey, ResourceMissing
from ledger_app.events.models import Event
from ledger_app.events.selectors import events_listed
from ledger_app.idempotency.services import (
    RESERVED_KEY_PREFIXES,
    Created,
    refuse_reserved_key,
    validate_key,
)
from ledger_app.paging import created_in, page_newest_first
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import with_first_refunds
from ledger_app.refunds.services import create_refund, update_refund_metadata
from ledger_app.rendering.charges import (
    EMBEDDED_REFUNDS,
    EXPANDED_REFUNDS,
    ChargeListSerializer,
    ChargeSerializer,
)
from ledger_app.rendering.events import EventListSerializer, EventSerializer, refunds_now_for
from ledger_app.rendering.fields import ErrorSerializer
from ledger_app.rendering.payment_intents import PaymentIntentSerializer, payment_intent_in
from ledger_app.rendering.refunds import RefundListSerializer, RefundSerializer
from ledger_app.replica import stale_ok

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


def read_schema(operation_id: str, response_serializer, params_class=None):
    """The schema of a GET: its query parameters (from the serializer that checks them)."""
    return extend_schema(
        operation_id=operation_id,
        parameters=[params_class] if params_class else [],
        responses={200: response_serializer, **ERRORS},
    )


def create_schema(operation_id: str, params_class, response_serializer, *, keyed: bool = True):
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


def checked_params(params_class: type[Params], data) -> dict[str, Any]:
    """The request's parameters, folded and checked by the endpoint's serializer."""
    params = fold(params_class, data)
    serializer = params_class(data=params, context={"from_json": params.from_json})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def object_or_404(model, object_id: str, name: str, using: str = DEFAULT_DB_ALIAS):
    """The object a URL names; 404 resource_missing when there is none."""
    if could_be_an_id(object_id):
        obj = model.objects.using(using).filter(pk=object_id).first()
    else:
        obj = None
    if obj is None:
        raise not_found(object_id, name)
    return obj


def retrieved(
    request, model, object_id: str, serializer_class, params_class: type[Params] = RetrieveParams
) -> Response:
    """A GET of one object by the id in its URL (its only parameter expand[]); from the
    replica if there is one and it has the object, else from the primary."""
    asked = checked_params(params_class, request.query_params).get("expand", set())
    name = model._meta.model_name

    def shown(alias: str) -> dict:
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


def created_response(request, result: Created, serializer_class, asked: set[str]) -> Response:
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
    obj, serializer_class, asked: set[str], version: str, using: str = DEFAULT_DB_ALIAS
) -> dict:
    """One object as the API shows it in `version`, with the expansions `asked`
    (expansion.py)."""
    own = asked & expansion.SERIALIZER_EXPANDS
    data = serializer_class(obj, context=shown_context(own, version)).data
    return expansion.expand([data], asked - own, using, version)[0]


def listing(request, queryset, params: dict, serializer_class, url: str) -> Response:
    """A page of `queryset` as Stripe's list, from the primary."""
    return Response(list_page(queryset, params, serializer_class, url, version_of(request)))


def stale_listing(
    request, queryset, params: dict, serializer_class, url: str, *, prepare=None
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
    queryset, params: dict, serializer_class, url: str, version: str, *, prepare=None
) -> dict:
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


def idempotency_key(request) -> str | None:
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


class ChargesView(StripeView):
    path_param = None

    @read_schema("charges_list", ChargeListSerializer, ChargeListParams)
    def get(self, request):
        params = checked_params(ChargeListParams, request.query_params)
        charges = Charge.objects.filter(created_in(params.get("created")))
        if "payment_intent" in params:
            charges = charges.filter(payment_intent=params["payment_intent"])
        if params.get("customer"):  # sent blank: not filtered, as a blank cursor
            charges = charges.filter(customer=params["customer"])
        return stale_listing(
            request, charges, params, ChargeSerializer, "/v1/charges", prepare=first_refunds
        )

    @create_schema("charges_create", ChargeCreateParams, ChargeSerializer)
    def post(self, request):
        key = idempotency_key(request)
        params = checked_params(ChargeCreateParams, request.data)
        result = create_charge(
            amount=params["amount"],
            currency=params["currency"],
            description=params.get("description", ""),
            metadata=params["metadata"],
            idempotency_key=key,
            actor=request.user.label,
        )
        return created_response(request, result, ChargeSerializer, params.get("expand", set()))


class ChargeView(StripeView):
    path_param = "charge"

    @read_schema("charges_retrieve", ChargeSerializer, ChargeRetrieveParams)
    def get(self, request, charge_id: str):
        params = checked_params(ChargeRetrieveParams, request.query_params)
        asked = params.get("expand", set())

        def charge(alias: str) -> dict:
            found = object_or_404(Charge, charge_id, "charge", alias)
            return rendered(found, ChargeSerializer, asked, version_of(request), alias)

        return Response(stale_ok(charge, missing=(ApiError,)))


class ChargeRefundsView(StripeView):
    """Where a charge's `refunds` list pages on (its url): Stripe's list of a charge's
    refunds."""

    path_param = None  # an unknown cursor is a 400 naming it; an unknown charge a 404

    @create_schema("charges_refunds_create", ChargeRefundCreateParams, RefundSerializer)
    def post(self, request, charge_id: str):
        """Stripe's older way to refund: the charge in the path, otherwise as
        POST /v1/refunds (the same rules, key and events)."""
        key = idempotency_key(request)
        params = checked_params(ChargeRefundCreateParams, request.data)
        charge = object_or_404(Charge, charge_id, "charge")
        return api_refund(request, key, params, charge_id=charge.pk)

    @read_schema("charges_refunds_list", RefundListSerializer, RefundPage)
    def get(self, request, charge_id: str):
        params = checked_params(RefundPage, request.query_params)

        def refunds_page(alias: str) -> dict:
            charge = object_or_404(Charge, charge_id, "charge", alias)
            url = f"/v1/charges/{charge.id}/refunds"
            refunds = charge.refunds.all()
            return list_page(refunds, params, RefundSerializer, url, version_of(request))

        return Response(stale_ok(refunds_page, missing=(ApiError, ResourceMissing)))


class RefundsView(StripeView):
    path_param = None

    @read_schema("refunds_list", RefundListSerializer, RefundListParams)
    def get(self, request):
        params = checked_params(RefundListParams, request.query_params)
        refunds = Refund.objects.filter(created_in(params.get("created")))
        if "charge" in params:
            refunds = refunds.filter(charge_id=params["charge"])
        if "payment_intent" in params:  # through the charge's index
            refunds = refunds.filter(charge__payment_intent=params["payment_intent"])
        return stale_listing(request, refunds, params, RefundSerializer, "/v1/refunds")

    @create_schema("refunds_create", RefundCreateParams, RefundSerializer)
    def post(self, request):
        key = idempotency_key(request)
        params = checked_params(RefundCreateParams, request.data)
        return api_refund(
            request,
            key,
            params,
            charge_id=params.get("charge"),
            payment_intent=params.get("payment_intent"),
        )


class RefundView(StripeView):
    path_param = "refund"

    @read_schema("refunds_retrieve", RefundSerializer, RefundRetrieveParams)
    def get(self, request, refund_id: str):
        return retrieved(request, Refund, refund_id, RefundSerializer, RefundRetrieveParams)

    @create_schema("refunds_update", RefundUpdateParams, RefundSerializer, keyed=False)
    def post(self, request, refund_id: str):
        """Stripe's refund update: only metadata changes (merged; a key sent empty is
        removed). Sending nothing new changes nothing."""
        params = checked_params(RefundUpdateParams, request.data)
        if not could_be_an_id(refund_id):
            raise not_found(refund_id, "refund")
        refund = update_refund_metadata(refund_id=refund_id, metadata=params.get("metadata", {}))
        return Response(
            rendered(refund, RefundSerializer, params.get("expand", set()), version_of(request))
        )


class RefundCancelView(StripeView):
    path_param = "refund"

    @create_schema("refunds_cancel", RefundCancelParams, RefundSerializer, keyed=False)
    def post(self, request, refund_id: str):
        """Cancel a refund awaiting approval: its amount is released, as a rejection
        does. Only the key that asked for it may cancel it: any other key, and any other
        status, is a 400 refund_not_cancelable (not a 404: every key of this account may
        read the refund)."""
        params = checked_params(RefundCancelParams, request.data)
        if not could_be_an_id(refund_id):
            raise not_found(refund_id, "refund")
        refund = cancel_refund(refund_id=refund_id, actor=request.user.label)
        return Response(
            rendered(refund, RefundSerializer, params.get("expand", set()), version_of(request))
        )


class EventsView(StripeView):
    path_param = None

    @read_schema("events_list", EventListSerializer, EventListParams)
    def get(self, request):
        params = checked_params(EventListParams, request.query_params)
        events = events_listed(
            type_name=params.get("type"),
            types=params.get("types"),
            created=params.get("created"),
            version=version_of(request),
        )
        return stale_listing(
            request, events, params, EventSerializer, "/v1/events", prepare=refunds_now
        )


class EventView(StripeView):
    path_param = "event"

    @read_schema("events_retrieve", EventSerializer, RetrieveParams)
    def get(self, request, event_id: str):
        return retrieved(request, Event, event_id, EventSerializer)


class PaymentIntentView(StripeView):
    """A PaymentIntent as far as the ledger knows it: through its charges."""

    path_param = "payment_intent"

    @read_schema("payment_intents_retrieve", PaymentIntentSerializer, PaymentIntentRetrieveParams)
    def get(self, request, intent_id: str):
        params = checked_params(PaymentIntentRetrieveParams, request.query_params)
        version = version_of(request)

        def intent(alias: str) -> dict:
            charge_id = (
                charge_of_payment_intent(intent_id, using=alias)
                if PAYMENT_INTENT_ID.fullmatch(intent_id)
                else None
            )
            if charge_id is None:
                raise not_found(intent_id, "payment_intent")
            charge = Charge.objects.using(alias).get(pk=charge_id)
            shown = payment_intent_in(charge, version, alias)
            return expansion.expand([shown], params.get("expand", set()), alias, version)[0]

        return Response(stale_ok(intent, missing=(ApiError,)))


def api_refund(request, key: str | None, params: dict[str, Any], **charge_named) -> Response:
    """A refund asked for through the API, of the charge `charge_named` names (charge_id,
    payment_intent), and its answer."""
    result = create_refund(
        **charge_named,
        amount=params.get("amount"),  # absent: all that is left
        reason=params.get("reason"),
        metadata=params.get("metadata"),
        idempotency_key=key,
        actor=request.user.label,
        source=Refund.Source.API,
    )
    return created_response(request, result, RefundSerializer, params.get("expand", set()))


def refunds_now(events: list[Event], context: dict[str, Any]) -> list[Event]:
    """A page of events, with what older API versions show of their charges' refunds
    read for the page at once (rendering/events.py's refunds_now_for), not once per event."""
    context["refunds_now"] = refunds_now_for(events, context["version"])
    return events


def first_refunds(charges: list[Charge], context: dict[str, Any]) -> list[Charge]:
    """A page of charges with the refunds each shows (and one more, for has_more),
    fetched in one query for the page: 10, or 100 with expand[]=data.refunds; none in
    API versions that do not embed them."""
    if not context["embed_refunds"]:
        return charges
    shown = EXPANDED_REFUNDS if "refunds" in context["expand"] else EMBEDDED_REFUNDS
    return with_first_refunds(charges, shown + 1)
