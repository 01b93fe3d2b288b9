"""/v1/charges: list and create charges, and retrieve one (a charge's refunds are
refunds.py's ChargeRefundsView). A page of charges reads the refunds each embeds in one
query for the page."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from ledger_app.api.authentication import client_of
from ledger_app.api.errors import ApiError
from ledger_app.api.params import ChargeCreateParams, ChargeListParams, ChargeRetrieveParams
from ledger_app.api.shared import (
    checked_params,
    create_schema,
    created_response,
    idempotency_key,
    object_or_404,
    read_schema,
    rendered,
    stale_listing,
)
from ledger_app.api.versions import StripeView, version_of
from ledger_app.charges.models import Charge
from ledger_app.charges.services import create_charge
from ledger_app.paging import created_in
from ledger_app.refunds.selectors import with_first_refunds
from ledger_app.rendering.charges import (
    EMBEDDED_REFUNDS,
    EXPANDED_REFUNDS,
    ChargeListSerializer,
    ChargeSerializer,
)
from ledger_app.replica import stale_ok


class ChargesView(StripeView):
    path_param = None

    @read_schema("charges_list", ChargeListSerializer, ChargeListParams)
    def get(self, request: Request) -> Response:
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
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        params = checked_params(ChargeCreateParams, request.data)
        result = create_charge(
            amount=params["amount"],
            currency=params["currency"],
            description=params.get("description", ""),
            metadata=params["metadata"],
            receipt_email=params.get("receipt_email", ""),
            idempotency_key=key,
            actor=client_of(request).label,
        )
        return created_response(request, result, ChargeSerializer, params.get("expand", set()))


class ChargeView(StripeView):
    path_param = "charge"

    @read_schema("charges_retrieve", ChargeSerializer, ChargeRetrieveParams)
    def get(self, request: Request, charge_id: str) -> Response:
        params = checked_params(ChargeRetrieveParams, request.query_params)
        asked = params.get("expand", set())

        def charge(alias: str) -> dict:
            found = object_or_404(Charge, charge_id, "charge", alias)
            return rendered(found, ChargeSerializer, asked, version_of(request), alias)

        return Response(stale_ok(charge, missing=(ApiError,)))


def first_refunds(charges: list[Charge], context: dict[str, Any]) -> list[Charge]:
    """A page of charges with the refunds each shows (and one more, for has_more),
    fetched in one query for the page: 10, or 100 with expand[]=data.refunds; none in
    API versions that do not embed them."""
    if not context["embed_refunds"]:
        return charges
    shown = EXPANDED_REFUNDS if "refunds" in context["expand"] else EMBEDDED_REFUNDS
    return with_first_refunds(charges, shown + 1)
