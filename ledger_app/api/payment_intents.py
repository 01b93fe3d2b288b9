"""/v1/payment_intents/{id}: a PaymentIntent as far as the ledger knows it, through its
charges (rendering/payment_intents.py draws it)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from ledger_app.api import expansion
from ledger_app.api.errors import ApiError
from ledger_app.api.params import PaymentIntentRetrieveParams
from ledger_app.api.shared import checked_params, not_found, read_schema
from ledger_app.api.versions import StripeView, version_of
from ledger_app.charges.models import PAYMENT_INTENT_ID, Charge
from ledger_app.charges.selectors import charge_of_payment_intent
from ledger_app.rendering.payment_intents import PaymentIntentSerializer, payment_intent_in
from ledger_app.replica import stale_ok


class PaymentIntentView(StripeView):
    """A PaymentIntent as far as the ledger knows it: through its charges."""

    path_param = "payment_intent"

    @read_schema("payment_intents_retrieve", PaymentIntentSerializer, PaymentIntentRetrieveParams)
    def get(self, request: Request, intent_id: str) -> Response:
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
