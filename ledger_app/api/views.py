"""The /v1/ endpoints. Each view parses, makes one service or selector call, and renders."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger_app import errors
from ledger_app.api import parsing
from ledger_app.api.errors import ApiError
from ledger_app.api.serializers import (
    ChargeCreateSerializer,
    ChargeListSerializer,
    ChargeSerializer,
    ErrorSerializer,
    RefundCreateSerializer,
    RefundListSerializer,
    RefundSerializer,
)
from ledger_app.models import Charge, Refund
from ledger_app.selectors import page_newest_first
from ledger_app.services.charges import create_charge
from ledger_app.services.idempotency import Created
from ledger_app.services.refunds import create_refund

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409, 413, 415, 429)}
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 255},
    OpenApiParameter.HEADER,
    description="1 to 255 characters. The same key and request again replays the first "
    "result (header Idempotent-Replayed: true); the same key with another request is a 400 "
    "idempotency_error.",
)
EXPAND = OpenApiParameter("expand[]", OpenApiTypes.STR, many=True, required=False)
LIST_PARAMS = [
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": 100},
        description="1 to 100, default 10.",
    ),
    OpenApiParameter("starting_after", OpenApiTypes.STR, description="An id: the page after it."),
    OpenApiParameter("ending_before", OpenApiTypes.STR, description="An id: the page before it."),
]


def created(result: Created, serializer_class) -> Response:
    response = Response(serializer_class(result.item, context={"expand": ()}).data)
    if result.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def cursor(params: dict, name: str) -> str | None:
    return parsing.object_id(params[name], name) if params.get(name) else None


def listing(queryset, params: dict, serializer_class, url: str) -> Response:
    if params.get("starting_after") and params.get("ending_before"):
        raise ApiError("Send starting_after or ending_before, not both.", code="parameter_invalid")
    page = page_newest_first(
        queryset,
        limit=parsing.limit(params),
        starting_after=cursor(params, "starting_after"),
        ending_before=cursor(params, "ending_before"),
    )
    return Response(
        {
            "object": "list",
            "data": serializer_class(page.items, many=True).data,
            "has_more": page.has_more,
            "url": url,
        }
    )


def idempotency_key(request) -> str | None:
    return request.headers.get("Idempotency-Key")


class ChargesView(APIView):
    path_param = None

    @extend_schema(
        operation_id="charges_list",
        parameters=LIST_PARAMS,
        responses={200: ChargeListSerializer, **ERRORS},
    )
    def get(self, request):
        params = parsing.fold(request.query_params)
        parsing.only(params, {"limit", "starting_after", "ending_before"})
        return listing(Charge.objects.all(), params, ChargeSerializer, "/v1/charges")

    @extend_schema(
        operation_id="charges_create",
        request={
            "application/x-www-form-urlencoded": ChargeCreateSerializer,
            "application/json": ChargeCreateSerializer,
        },
        parameters=[IDEMPOTENCY_KEY],
        responses={200: ChargeSerializer, **ERRORS},
    )
    def post(self, request):
        params = parsing.fold(request.data)
        parsing.only(params, {"amount", "currency", "description", "metadata", "source", "expand"})
        parsing.expand(params, set())
        metadata = parsing.metadata(params.get("metadata")) or {}
        if "source" in params:  # the payment source travels to the provider in metadata
            if "source" in metadata:
                raise ApiError(
                    "Send the source once: as source, not also in metadata.",
                    code="parameter_invalid",
                    param="source",
                )
            metadata = {**metadata, "source": parsing.string(params["source"], "source")}
        result = create_charge(
            amount=parsing.integer(parsing.required(params, "amount"), "amount", params),
            currency=parsing.string(parsing.required(params, "currency"), "currency"),
            description=parsing.string(params.get("description", ""), "description"),
            metadata=metadata,
            idempotency_key=idempotency_key(request),
            actor=request.user.label,
        )
        return created(result, ChargeSerializer)


class ChargeView(APIView):
    path_param = "charge"

    @extend_schema(
        operation_id="charges_retrieve",
        parameters=[EXPAND],
        responses={200: ChargeSerializer, **ERRORS},
    )
    def get(self, request, charge_id: str):
        params = parsing.fold(request.query_params)
        parsing.only(params, {"expand"})
        expand = parsing.expand(params, {"refunds"})
        charge = Charge.objects.filter(pk=parsing.object_id(charge_id, "charge")).first()
        if charge is None:
            raise errors.ResourceMissing(f"No such charge: '{charge_id}'")
        return Response(ChargeSerializer(charge, context={"expand": expand}).data)


class RefundsView(APIView):
    path_param = None

    @extend_schema(
        operation_id="refunds_list",
        parameters=[
            OpenApiParameter("charge", OpenApiTypes.STR, description="Only this charge's."),
            *LIST_PARAMS,
        ],
        responses={200: RefundListSerializer, **ERRORS},
    )
    def get(self, request):
        params = parsing.fold(request.query_params)
        parsing.only(params, {"charge", "limit", "starting_after", "ending_before"})
        refunds = Refund.objects.all()
        if "charge" in params:
            refunds = refunds.filter(charge_id=parsing.object_id(params["charge"], "charge"))
        return listing(refunds, params, RefundSerializer, "/v1/refunds")

    @extend_schema(
        operation_id="refunds_create",
        request={
            "application/x-www-form-urlencoded": RefundCreateSerializer,
            "application/json": RefundCreateSerializer,
        },
        parameters=[IDEMPOTENCY_KEY],
        responses={200: RefundSerializer, **ERRORS},
    )
    def post(self, request):
        params = parsing.fold(request.data)
        parsing.only(params, {"charge", "amount", "reason", "metadata", "expand"})
        parsing.expand(params, set())
        # Only an absent amount means "all that is left"; an explicit JSON null is refused,
        # so a client that writes a missing value as null never refunds everything.
        amount = parsing.integer(params["amount"], "amount", params) if "amount" in params else None
        result = create_refund(
            charge_id=parsing.string(parsing.required(params, "charge"), "charge"),
            amount=amount,
            reason=parsing.string(params.get("reason"), "reason", optional=True),
            metadata=parsing.metadata(params.get("metadata")),
            idempotency_key=idempotency_key(request),
            actor=request.user.label,
            source=Refund.Source.API,
        )
        return created(result, RefundSerializer)


class RefundView(APIView):
    path_param = "refund"

    @extend_schema(operation_id="refunds_retrieve", responses={200: RefundSerializer, **ERRORS})
    def get(self, request, refund_id: str):
        parsing.only(parsing.fold(request.query_params), set())
        refund = Refund.objects.filter(pk=parsing.object_id(refund_id, "refund")).first()
        if refund is None:
            raise errors.ResourceMissing(f"No such refund: '{refund_id}'")
        return Response(RefundSerializer(refund).data)
