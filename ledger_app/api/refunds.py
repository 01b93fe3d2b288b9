"""/v1/refunds and /v1/charges/{charge}/refunds: list, create, retrieve, update (metadata)
and cancel refunds. A create is one call of refunds/services.py's create_refund
(api_refund), whichever URL asked for it."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from ledger_app.api.authentication import client_of
from ledger_app.api.errors import ApiError
from ledger_app.api.fields import could_be_an_id
from ledger_app.api.params import (
    ChargeRefundCreateParams,
    RefundCancelParams,
    RefundCreateParams,
    RefundListParams,
    RefundPage,
    RefundRetrieveParams,
    RefundUpdateParams,
)
from ledger_app.api.shared import (
    checked_params,
    create_schema,
    created_response,
    idempotency_key,
    list_page,
    not_found,
    object_or_404,
    read_schema,
    rendered,
    retrieved,
    stale_listing,
)
from ledger_app.api.versions import StripeView, version_of
from ledger_app.approvals.services import cancel_refund
from ledger_app.charges.models import Charge
from ledger_app.errors import ResourceMissing
from ledger_app.paging import created_in
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund, update_refund_metadata
from ledger_app.rendering.refunds import RefundListSerializer, RefundSerializer
from ledger_app.replica import stale_ok


class ChargeRefundsView(StripeView):
    """Where a charge's `refunds` list pages on (its url): Stripe's list of a charge's
    refunds."""

    path_param = None  # an unknown cursor is a 400 naming it; an unknown charge a 404

    @create_schema("charges_refunds_create", ChargeRefundCreateParams, RefundSerializer)
    def post(self, request: Request, charge_id: str) -> Response:
        """Stripe's older way to refund: the charge in the path, otherwise as
        POST /v1/refunds (the same rules, key and events)."""
        key = idempotency_key(request)
        params = checked_params(ChargeRefundCreateParams, request.data)
        charge = object_or_404(Charge, charge_id, "charge")
        return api_refund(request, key, params, charge_id=charge.pk)

    @read_schema("charges_refunds_list", RefundListSerializer, RefundPage)
    def get(self, request: Request, charge_id: str) -> Response:
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
    def get(self, request: Request) -> Response:
        params = checked_params(RefundListParams, request.query_params)
        refunds = Refund.objects.filter(created_in(params.get("created")))
        if "charge" in params:
            refunds = refunds.filter(charge_id=params["charge"])
        if "payment_intent" in params:  # through the charge's index
            refunds = refunds.filter(charge__payment_intent=params["payment_intent"])
        return stale_listing(request, refunds, params, RefundSerializer, "/v1/refunds")

    @create_schema("refunds_create", RefundCreateParams, RefundSerializer)
    def post(self, request: Request) -> Response:
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
    def get(self, request: Request, refund_id: str) -> Response:
        return retrieved(request, Refund, refund_id, RefundSerializer, RefundRetrieveParams)

    @create_schema("refunds_update", RefundUpdateParams, RefundSerializer, keyed=False)
    def post(self, request: Request, refund_id: str) -> Response:
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
    def post(self, request: Request, refund_id: str) -> Response:
        """Cancel a refund awaiting approval: its amount is released, as a rejection
        does. Only the key that asked for it may cancel it: any other key, and any other
        status, is a 400 refund_not_cancelable (not a 404: every key of this account may
        read the refund)."""
        params = checked_params(RefundCancelParams, request.data)
        if not could_be_an_id(refund_id):
            raise not_found(refund_id, "refund")
        refund = cancel_refund(refund_id=refund_id, actor=client_of(request).label)
        return Response(
            rendered(refund, RefundSerializer, params.get("expand", set()), version_of(request))
        )


def api_refund(
    request: Request,
    key: str | None,
    params: dict[str, Any],
    *,
    charge_id: str | None = None,
    payment_intent: str | None = None,
) -> Response:
    """A refund asked for through the API, of the charge `charge_id` or `payment_intent`
    names, and its answer."""
    result = create_refund(
        RefundRequest(
            charge_id=charge_id,
            payment_intent=payment_intent,
            amount=params.get("amount"),  # absent: all that is left
            reason=params.get("reason"),
            metadata=params.get("metadata"),
            instructions_email=params.get("instructions_email"),
            idempotency_key=key,
            actor=client_of(request).label,
            source=Refund.Source.API,
        )
    )
    return created_response(request, result, RefundSerializer, params.get("expand", set()))
