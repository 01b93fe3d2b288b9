"""The /v1/ endpoints. Each view checks its parameters with its serializer (params.py),
makes one service or selector call, and renders."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger_app import errors
from ledger_app.api import parsing
from ledger_app.api.fields import MAX_ID_LENGTH, could_be_an_id
from ledger_app.api.params import (
    ChargeCreateParams,
    ChargeRetrieveParams,
    ListParams,
    Params,
    RefundCreateParams,
    RefundListParams,
)
from ledger_app.models import Charge, Refund
from ledger_app.selectors import page_newest_first
from ledger_app.services.charges import create_charge
from ledger_app.services.idempotency import Created
from ledger_app.services.refunds import create_refund
from ledger_app.stripe_objects import (
    ChargeListSerializer,
    ChargeSerializer,
    ErrorSerializer,
    RefundListSerializer,
    RefundSerializer,
)

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409, 413, 415, 429)}
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 255},
    OpenApiParameter.HEADER,
    description="1 to 255 characters. The same key and request again replays the first "
    "result (header Idempotent-Replayed: true); the same key with another request is a 400 "
    "idempotency_error.",
)
DEFAULT_LIMIT = 10


def read_schema(operation_id: str, response_serializer, params_class=None):
    """The schema of a GET: its query parameters (from the serializer that checks them)."""
    return extend_schema(
        operation_id=operation_id,
        parameters=[params_class] if params_class else [],
        responses={200: response_serializer, **ERRORS},
    )


def create_schema(operation_id: str, params_class, response_serializer):
    """The schema of a POST that creates: a form or JSON body, and an Idempotency-Key."""
    return extend_schema(
        operation_id=operation_id,
        request={
            "application/x-www-form-urlencoded": params_class,
            "application/json": params_class,
        },
        parameters=[IDEMPOTENCY_KEY],
        responses={200: response_serializer, **ERRORS},
    )


def checked(params_class: type[Params], data) -> dict[str, Any]:
    """The request's parameters, folded and checked by the endpoint's serializer."""
    params = parsing.fold(data)
    serializer = params_class(data=params, context={"from_json": params.from_json})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def found(model, object_id: str, name: str):
    """The object a URL names; 404 resource_missing when there is none."""
    if not could_be_an_id(object_id):
        raise errors.ResourceMissing(f"No such object: '{object_id[:MAX_ID_LENGTH]}'", param=name)
    obj = model.objects.filter(pk=object_id).first()
    if obj is None:
        raise errors.ResourceMissing(f"No such {name}: '{object_id}'")
    return obj


def created(result: Created, serializer_class) -> Response:
    response = Response(serializer_class(result.item, context={"expand": ()}).data)
    if result.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def listing(queryset, params: dict, serializer_class, url: str) -> Response:
    page = page_newest_first(
        queryset,
        limit=params.get("limit", DEFAULT_LIMIT),
        starting_after=params.get("starting_after"),
        ending_before=params.get("ending_before"),
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

    @read_schema("charges_list", ChargeListSerializer, ListParams)
    def get(self, request):
        params = checked(ListParams, request.query_params)
        return listing(Charge.objects.all(), params, ChargeSerializer, "/v1/charges")

    @create_schema("charges_create", ChargeCreateParams, ChargeSerializer)
    def post(self, request):
        params = checked(ChargeCreateParams, request.data)
        result = create_charge(
            amount=params["amount"],
            currency=params["currency"],
            description=params.get("description", ""),
            metadata=params["metadata"],
            idempotency_key=idempotency_key(request),
            actor=request.user.label,
        )
        return created(result, ChargeSerializer)


class ChargeView(APIView):
    path_param = "charge"

    @read_schema("charges_retrieve", ChargeSerializer, ChargeRetrieveParams)
    def get(self, request, charge_id: str):
        params = checked(ChargeRetrieveParams, request.query_params)
        charge = found(Charge, charge_id, "charge")
        return Response(
            ChargeSerializer(charge, context={"expand": params.get("expand", set())}).data
        )


class RefundsView(APIView):
    path_param = None

    @read_schema("refunds_list", RefundListSerializer, RefundListParams)
    def get(self, request):
        params = checked(RefundListParams, request.query_params)
        refunds = Refund.objects.all()
        if "charge" in params:
            refunds = refunds.filter(charge_id=params["charge"])
        return listing(refunds, params, RefundSerializer, "/v1/refunds")

    @create_schema("refunds_create", RefundCreateParams, RefundSerializer)
    def post(self, request):
        params = checked(RefundCreateParams, request.data)
        result = create_refund(
            charge_id=params["charge"],
            amount=params.get("amount"),  # absent: all that is left
            reason=params.get("reason"),
            metadata=params.get("metadata"),
            idempotency_key=idempotency_key(request),
            actor=request.user.label,
            source=Refund.Source.API,
        )
        return created(result, RefundSerializer)


class RefundView(APIView):
    path_param = "refund"

    @read_schema("refunds_retrieve", RefundSerializer)
    def get(self, request, refund_id: str):
        checked(Params, request.query_params)
        return Response(RefundSerializer(found(Refund, refund_id, "refund")).data)
