"""Objects as Stripe shapes them: in API answers, in events' `data.object`, and so in
webhooks. Every field and every value is one Stripe's own object can have
(stripe/openapi's spec3.json; tests/api/test_stripe_conformance.py checks): a field that
means nothing here and that Stripe shows as null is null, one Stripe leaves out when it
has no value is left out. Statuses Stripe does not have (a refund waiting for approval,
an outcome not known yet) show as Stripe's `pending`; our own status is beside it, in
the one field of our own, `ledger_status`. What the API accepts is in api/params.py."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ledger_app import api_versions
from ledger_app.charges.models import Charge, MovementStatus
from ledger_app.events.models import Event
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import with_first_refunds

# How many of a charge's refunds it shows, newest first: has_more and url page on.
EMBEDDED_REFUNDS = 10
EXPANDED_REFUNDS = 100  # with expand[]=refunds
# A failed charge's status_detail that is a provider's code (card_declined), not prose.
FAILURE_CODE = re.compile(r"^[a-z][a-z0-9_]{0,99}\Z")


def unix(moment) -> int:
    return int(moment.timestamp())


class BlankAsNull(serializers.CharField):
    """Text a model keeps blank when there is none, which Stripe shows as null."""

    def __init__(self, **kwargs) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: str) -> str | None:  # type: ignore[override]  # null where the model keeps blank
        return value or None


class ExpandableId(BlankAsNull):
    """An id that expand[] may replace by its object (api/expansion.py): in the schema,
    the id or that object (`component`, the OpenAPI component's name)."""

    def __init__(self, component: str, **kwargs) -> None:
        self.component = component
        super().__init__(**kwargs)


class Fixed(serializers.Field):
    """A field with the same value on every object here, such as `livemode: false` or a
    `payment_intent` that is always null. `schema` is its OpenAPI schema (api/schema.py
    hands it to the generator): by default a nullable string, for null ids."""

    def __init__(self, value: Any = None, schema: dict | None = None, **kwargs) -> None:
        self.value = value
        self.schema = schema or {"type": "string", "nullable": True}
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, obj) -> Any:
        return copy.deepcopy(self.value)


# Stripe's documented refund failure_reason values; a provider's other words are `unknown`.
FAILURE_REASONS = frozenset(
    {
        "lost_or_stolen_card",
        "expired_or_canceled_card",
        "charge_for_pending_refund_disputed",
        "insufficient_funds",
        "declined",
        "merchant_request",
        "unknown",
    }
)
# Our statuses that Stripe's clients see as `pending`: money reserved, not final.
SHOWN_AS_PENDING = frozenset(
    {MovementStatus.PENDING, MovementStatus.UNKNOWN, MovementStatus.AWAITING_APPROVAL}
)


def shown_status(status: str) -> str:
    """A charge's or refund's status in Stripe's terms."""
    return MovementStatus.PENDING if status in SHOWN_AS_PENDING else status


# A charge's and a refund's declared fields are their OpenAPI schema (api/schema.py);
# render_charge and render_refund draw them, field by field in that order, without DRF's
# per-field machinery (an event's snapshot draws one or two objects inside a charge's lock,
# and DRF's fields were most of a refund's Python). tests/api/test_rendering.py holds the
# two to the same fields.
class StripeObject(serializers.Serializer):
    """An object whose `LEFT_OUT_WHEN_NULL` fields are absent when they have no value, as
    Stripe leaves them out (the spec has them optional and not nullable)."""

    LEFT_OUT_WHEN_NULL: tuple[str, ...] = ()


LEDGER_STATUS_HELP = (
    "Our own status, beside Stripe's: awaiting_approval (over the requester's limit, "
    "waiting for a person), pending (not sent yet, or sent and not answered), unknown (the "
    "provider's answer is not known yet: the reconciler asks), succeeded, failed, canceled. "
    "Stripe's `status` shows the first three as pending."
)

NULL_OBJECT = {"type": "object", "nullable": True}
NULL_INTEGER = {"type": "integer", "nullable": True}
FALSE = {"type": "boolean"}
NO_ADDRESS = dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state"))
NO_BILLING_DETAILS = {
    "address": NO_ADDRESS,
    "email": None,
    "name": None,
    "phone": None,
    "tax_id": None,
}


class RefundSerializer(StripeObject):
    LEFT_OUT_WHEN_NULL = ("failure_reason", "pending_reason")

    id = serializers.CharField()
    object = serializers.CharField(read_only=True)
    amount = serializers.IntegerField(help_text="Minor units.")
    application = Fixed()
    balance_transaction = Fixed()
    charge = ExpandableId("Charge", source="charge_id")
    created = serializers.IntegerField(read_only=True)
    currency = serializers.CharField()
    customer = Fixed()
    customer_account = Fixed()
    destination_details = Fixed(
        schema={"type": "object"},
        help_text="Where the money goes back: a card (`type: card`), with the card "
        "network's reference for the refund (`card.reference`, the acquirer reference "
        "number a customer's bank traces it by) once the provider has it "
        "(`card.reference_status`: pending, available, or unavailable for a refund that "
        "failed or was canceled).",
    )
    failure_reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        required=False,
        help_text="When failed: lost_or_stolen_card, expired_or_canceled_card, "
        "insufficient_funds, declined, merchant_request, or unknown; when canceled, "
        "merchant_request. Absent otherwise.",
    )
    metadata = serializers.DictField(child=serializers.CharField())
    payment_intent = ExpandableId(
        "PaymentIntent", help_text="Its charge's PaymentIntent (pi_...), if it has one."
    )
    payment_method = Fixed()
    reason = BlankAsNull()
    receipt_number = Fixed()
    source_transfer_reversal = Fixed()
    status = serializers.CharField(
        read_only=True,
        help_text="pending, succeeded, failed or canceled. Pending is money reserved and "
        "not final: not sent or not answered yet, its outcome unknown (the reconciler asks "
        "the provider), or waiting for approval; ledger_status tells which.",
    )
    pending_reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        required=False,
        help_text="processing while pending and sent or about to be; absent otherwise "
        "(waiting for approval: see ledger_status).",
    )
    transfer_reversal = Fixed()
    ledger_status = serializers.CharField(source="status", help_text=LEDGER_STATUS_HELP)

    def to_representation(self, instance: Refund) -> dict[str, Any]:
        return render_refund(instance)


def render_refund(refund: Refund) -> dict[str, Any]:
    """A refund as the API shows it: RefundSerializer's fields, in their order, each
    container new (the caller may keep or change it)."""
    status = refund.status
    shown: dict[str, Any] = {
        "id": refund.id,
        "object": "refund",
        "amount": refund.amount,
        "application": None,
        "balance_transaction": None,
        "charge": refund.charge_id or None,
        "created": unix(refund.created_at),
        "currency": refund.currency,
        "customer": None,
        "customer_account": None,
        "destination_details": destination_details(refund),
    }
    if status == Refund.Status.CANCELED:  # as Stripe shows a canceled refund
        shown["failure_reason"] = "merchant_request"
    elif status == Refund.Status.FAILED:
        detail = refund.status_detail
        shown["failure_reason"] = detail if detail in FAILURE_REASONS else "unknown"
    shown.update(
        metadata=_metadata(refund.metadata),
        payment_intent=refund.payment_intent or None,
        payment_method=None,
        reason=refund.reason or None,
        receipt_number=None,
        source_transfer_reversal=None,
        status=str(shown_status(status)),
    )
    if status in (Refund.Status.PENDING, Refund.Status.UNKNOWN):
        shown["pending_reason"] = "processing"
    shown.update(transfer_reversal=None, ledger_status=str(status))
    return shown


def destination_details(refund: Refund) -> dict[str, Any]:
    """Where a card refund goes back, as Stripe shows it: the network's reference (the
    acquirer reference number) once the provider has given it. Before the refund is sent
    and answered it is `pending`; a failed or canceled one has none to give."""
    status = refund.status
    card: dict[str, Any]
    if status in (Refund.Status.FAILED, Refund.Status.CANCELED):
        card = {"reference_status": "unavailable", "type": "refund"}
    elif status != Refund.Status.SUCCEEDED:
        card = {"reference_status": "pending", "type": "pending"}
    elif refund.destination_reference:
        card = {
            "reference": refund.destination_reference,
            "reference_status": "available",
            "reference_type": "acquirer_reference_number",
            "type": "refund",
        }
    else:
        card = {
            "reference_status": "pending",
            "reference_type": "acquirer_reference_number",
            "type": "refund",
        }
    return {"card": card, "type": "card"}


def _metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as the API shows it: a new dict of strings (as DRF's DictField would)."""
    return {str(key): None if value is None else str(value) for key, value in metadata.items()}


# Stripe's list object: a page of `data`, newest first. (A comment, not a docstring:
# drf-spectacular would show it as the description of every list.)
class StripeList(serializers.Serializer):
    object = serializers.CharField(default="list")
    has_more = serializers.BooleanField()
    url = serializers.CharField()


class RefundListSerializer(StripeList):
    data = RefundSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


class ChargeSerializer(StripeObject):
    """A charge. Its `refunds` are shown only when the context's `embed_refunds` says so
    (API versions before 2022-11-15, or expand[]=refunds; see api_versions.py)."""

    OPTIONAL_FIELDS = ("refunds",)  # left out in current versions unless expanded

    id = serializers.CharField()
    object = serializers.CharField(read_only=True)
    amount = serializers.IntegerField(help_text="Minor units.")
    amount_captured = serializers.IntegerField(read_only=True)
    amount_refunded = serializers.IntegerField()
    application = Fixed()
    application_fee = Fixed()
    application_fee_amount = Fixed(schema=NULL_INTEGER)
    balance_transaction = Fixed()
    billing_details = Fixed(NO_BILLING_DETAILS, {"type": "object"})
    calculated_statement_descriptor = Fixed()
    captured = serializers.BooleanField(read_only=True)
    created = serializers.IntegerField(read_only=True)
    currency = serializers.CharField()
    customer = BlankAsNull()
    description = BlankAsNull()
    disputed = serializers.BooleanField(
        read_only=True, help_text="Whether the provider told of a dispute of it (open or closed)."
    )
    failure_balance_transaction = Fixed()
    failure_code = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="A failed charge's code from the provider (card_declined), when it gave one.",
    )
    failure_message = serializers.CharField(read_only=True, allow_null=True)
    fraud_details = Fixed({}, {"type": "object"})
    livemode = Fixed(False, FALSE)
    metadata = serializers.DictField(child=serializers.CharField())
    on_behalf_of = Fixed()
    outcome = Fixed(schema=NULL_OBJECT)
    paid = serializers.BooleanField(read_only=True)
    payment_intent = ExpandableId(
        "PaymentIntent", help_text="The PaymentIntent (pi_...) it belongs to, if any."
    )
    payment_method = Fixed()
    payment_method_details = Fixed(schema=NULL_OBJECT)
    receipt_email = Fixed()
    receipt_number = Fixed()
    receipt_url = Fixed()
    refunded = serializers.BooleanField()
    refunds = RefundListSerializer(
        read_only=True,
        help_text=f"The charge's {EMBEDDED_REFUNDS} newest refunds ({EXPANDED_REFUNDS} with "
        "expand[]=refunds); has_more says whether there are others, and url lists them all.",
    )
    review = Fixed()
    shipping = Fixed(schema=NULL_OBJECT)
    source = Fixed(schema=NULL_OBJECT)  # type: ignore[assignment]  # Stripe's field, declared (the metaclass takes it off the class)
    source_transfer = Fixed()
    statement_descriptor = Fixed()
    statement_descriptor_suffix = Fixed()
    status = serializers.CharField(
        read_only=True,
        help_text="pending, succeeded or failed; pending also while the capture's outcome "
        "is unknown (ledger_status unknown).",
    )
    transfer_data = Fixed(schema=NULL_OBJECT)
    transfer_group = Fixed()
    ledger_status = serializers.CharField(source="status", help_text=LEDGER_STATUS_HELP)

    def to_representation(self, instance: Charge) -> dict[str, Any]:
        if not self.context.get("embed_refunds", True):
            return render_charge(instance)
        expanded = "refunds" in self.context.get("expand", ())
        size = EXPANDED_REFUNDS if expanded else EMBEDDED_REFUNDS
        # A list's charges come with theirs (selectors.with_first_refunds), enough of them
        # when they number one more than shown
        refunds = getattr(instance, "first_refunds", None)
        if getattr(instance, "first_refunds_count", 0) <= size:
            refunds = None
        if refunds is None:
            refunds = _newest_refunds(instance, size + 1)
        return render_charge(instance, refunds=refund_list(instance, refunds, size))


def render_charge(charge: Charge, *, refunds: dict[str, Any] | None = None) -> dict[str, Any]:
    """A charge as the API shows it: ChargeSerializer's fields, in their order, each
    container new; `refunds` (refund_list's) only when it embeds them."""
    status = charge.status
    succeeded = status == Charge.Status.SUCCEEDED
    failed = status == Charge.Status.FAILED
    detail = charge.status_detail
    shown: dict[str, Any] = {
        "id": charge.id,
        "object": "charge",
        "amount": charge.amount,
        "amount_captured": charge.amount if succeeded else 0,
        "amount_refunded": charge.amount_refunded,
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "balance_transaction": None,
        "billing_details": {**NO_BILLING_DETAILS, "address": dict(NO_ADDRESS)},
        "calculated_statement_descriptor": None,
        "captured": succeeded,
        "created": unix(charge.created_at),
        "currency": charge.currency,
        "customer": charge.customer or None,
        "description": charge.description or None,
        "disputed": bool(charge.dispute_id),
        "failure_balance_transaction": None,
        # A failed charge's code from the provider (card_declined), when it gave one.
        "failure_code": detail if failed and FAILURE_CODE.match(detail) else None,
        "failure_message": (detail or None) if failed else None,
        "fraud_details": {},
        "livemode": False,
        "metadata": _metadata(charge.metadata),
        "on_behalf_of": None,
        "outcome": None,
        "paid": succeeded,
        "payment_intent": charge.payment_intent or None,
        "payment_method": None,
        "payment_method_details": None,
        "receipt_email": None,
        "receipt_number": None,
        "receipt_url": None,
        "refunded": bool(charge.refunded),
    }
    if refunds is not None:
        shown["refunds"] = refunds
    shown.update(
        review=None,
        shipping=None,
        source=None,
        source_transfer=None,
        statement_descriptor=None,
        statement_descriptor_suffix=None,
        status=str(shown_status(status)),
        transfer_data=None,
        transfer_group=None,
        ledger_status=str(status),
    )
    return shown


def _newest_refunds(charge: Charge, count: int) -> list[Refund]:
    """A charge's `count` newest refunds, newest first, read now."""
    return list(charge.refunds.order_by("-created_at", "-id")[:count])


def refund_list(charge: Charge, refunds: list[Refund], size: int) -> dict[str, Any]:
    """A charge's embedded refunds: the first `size` of `refunds` (newest first, one more
    than `size` when there are more), and whether there are others."""
    return {
        "object": "list",
        "data": [plain(refund) for refund in refunds[:size]],
        "has_more": len(refunds) > size,
        "url": f"/v1/charges/{charge.id}/refunds",
    }


class ChargeListSerializer(StripeList):
    data = ChargeSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


class ErrorDetailSerializer(serializers.Serializer):
    type = serializers.CharField()
    code = serializers.CharField(allow_null=True)
    message = serializers.CharField()
    param = serializers.CharField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class EventSerializer(serializers.Serializer):
    """Stripe's event: what changed (`type`), the object right after the change
    (`data.object`) and, for an update, the moved fields as they were before
    (`data.previous_attributes`), and the API request that caused it, if one did."""

    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    api_version = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField()
    data = serializers.SerializerMethodField()  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
    livemode = serializers.SerializerMethodField()
    pending_webhooks = serializers.SerializerMethodField()
    request = serializers.SerializerMethodField()
    type = serializers.CharField()

    def get_object(self, event) -> str:
        return "event"

    def get_api_version(self, event) -> str:
        return self.context.get("version", api_versions.LATEST)

    def get_created(self, event) -> int:
        return unix(event.created_at)

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "object": {"type": "object"},
                "previous_attributes": {"type": "object"},
            },
        }
    )
    def get_data(self, event) -> dict:
        version = self.context.get("version", api_versions.LATEST)
        shown = current_shape(event.data_object)
        data = {"object": in_version(shown, version, self.context.get("refunds_now"))}
        if event.previous_attributes is not None:
            data["previous_attributes"] = current_previous(event.previous_attributes)
        return data

    def get_livemode(self, event) -> bool:
        return False

    def get_pending_webhooks(self, event) -> int:
        counted = getattr(event, "pending_webhooks", None)  # selectors.events_listed
        if counted is not None:
            return counted
        return event.deliveries.filter(status="pending").count()

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "nullable": True},
                "idempotency_key": {"type": "string", "nullable": True},
            },
        }
    )
    def get_request(self, event) -> dict:
        return {
            "id": event.request_id or None,
            "idempotency_key": event.request_idempotency_key or None,
        }


class EventListSerializer(StripeList):
    data = EventSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


def current_shape(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot as the API shows objects now. Events recorded before `ledger_status`
    existed showed our own statuses in `status` (unknown; pending with pending_reason
    awaiting_approval), null failure and pending reasons and `destination_details:
    null`: they are shown in Stripe's values."""
    if snapshot.get("object") not in ("refund", "charge") or "ledger_status" in snapshot:
        return snapshot
    shown = dict(snapshot)
    ledger = shown.get("status")
    if shown.pop("pending_reason", None) == "awaiting_approval":
        ledger = MovementStatus.AWAITING_APPROVAL
    shown["ledger_status"], shown["status"] = ledger, shown_status(str(ledger))
    if shown["object"] == "refund":
        if ledger in (MovementStatus.PENDING, MovementStatus.UNKNOWN):
            shown["pending_reason"] = "processing"
        reason = shown.pop("failure_reason", None)
        if ledger == MovementStatus.FAILED:
            shown["failure_reason"] = reason if reason in FAILURE_REASONS else "unknown"
        if shown.get("destination_details", "") is None:
            del shown["destination_details"]
    else:
        refunds = shown.get("refunds")
        if isinstance(refunds, dict) and isinstance(refunds.get("data"), list):
            shown["refunds"] = {**refunds, "data": [current_shape(r) for r in refunds["data"]]}
    return shown


def current_previous(previous: dict[str, Any]) -> dict[str, Any]:
    """`previous_attributes` recorded before `ledger_status` existed, in Stripe's values."""
    if "ledger_status" in previous or not ({"status", "pending_reason"} & set(previous)):
        return previous
    shown = dict(previous)
    ledger = shown.get("status")
    if shown.pop("pending_reason", None) == "awaiting_approval":
        ledger = MovementStatus.AWAITING_APPROVAL
    if ledger is not None:
        shown["ledger_status"], shown["status"] = ledger, shown_status(str(ledger))
    return shown


def plain(
    obj: Charge | Refund,
    *,
    newest_refunds: list[Refund] | None = None,
    embed_refunds: bool = True,
) -> dict[str, Any]:
    """The object as GET /v1/charges/{id} or /v1/refunds/{id} shows it with no expand[]:
    what an event's `data.object` holds and what a charge embeds of its refunds. A charge
    embeds its refunds only with `embed_refunds` (older API versions): then
    `newest_refunds` (newest first, EMBEDDED_REFUNDS + 1 at most) are the ones it embeds,
    when the caller has them; without them they are read."""
    if not isinstance(obj, Charge):
        return render_refund(obj)
    if not embed_refunds:
        return render_charge(obj)
    if newest_refunds is None:
        newest_refunds = _newest_refunds(obj, EMBEDDED_REFUNDS + 1)
    return render_charge(obj, refunds=refund_list(obj, newest_refunds, EMBEDDED_REFUNDS))


def shown_previous(
    obj: Charge | Refund, moved: dict[str, Any], shown_now: dict[str, Any]
) -> dict[str, Any]:
    """Stripe's `previous_attributes` for a change that moved `moved` (model fields, as
    they were) on `obj`, now shown as `shown_now`: the fields the API shows differently,
    as it showed them before (null for a field it left out). A status move can change
    several fields (status, ledger_status, pending_reason, destination_details) or, from
    one pending to another, only ledger_status; a card reference given, only
    destination_details. Other moves (amount_refunded, metadata) are already in the API's
    terms and are passed on as they are."""
    if not {"status", "destination_reference"} & set(moved):
        return moved
    before = copy.copy(obj)
    for name, value in moved.items():
        if name in MOVABLE_FIELDS:
            setattr(before, name, value)
    shown_before = plain(before, embed_refunds=False)
    names = (set(shown_before) | set(shown_now)) - {"refunds"}
    return {
        name: shown_before.get(name)
        for name in sorted(names)
        if shown_before.get(name) != shown_now.get(name)
    }


MOVABLE_FIELDS = frozenset(
    {"status", "status_detail", "amount_refunded", "metadata", "destination_reference"}
)


def event_body(event: Event, version: str) -> str:
    """An event as a webhook delivery sends it, in its endpoint's API version
    (pending_webhooks as it is now)."""
    shown = EventSerializer(event, context={"version": version}).data
    return json.dumps(api_versions.shown_in(shown, version))


def in_version(
    snapshot: dict[str, Any], version: str, refunds_now: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An event's object in an API version: a charge without `refunds` from 2022-11-15
    on; with them before, read now when the snapshot was taken without them (no endpoint
    then asked for that version). `refunds_now`: those a page of events needs, read for
    the page at once (refunds_now_for); without it, this one charge's are read the same way."""
    if snapshot.get("object") != "charge":
        return snapshot
    if not api_versions.embeds_refunds(version):
        return {name: value for name, value in snapshot.items() if name != "refunds"}
    if "refunds" in snapshot:
        return snapshot
    charge_id = snapshot.get("id")
    if refunds_now is None or charge_id not in refunds_now:
        refunds_now = _embedded_refunds({charge_id}, "default")
    if charge_id not in refunds_now:
        return snapshot
    return {**snapshot, "refunds": refunds_now[charge_id]}


def refunds_now_for(events: list[Event], version: str) -> dict[str, Any]:
    """For a page of events shown in `version`: the embedded refunds of each charge whose
    snapshot was taken without them, as in_version shows them, in two queries for the
    page (the charges, and their newest refunds). Nothing when the version embeds none."""
    if not api_versions.embeds_refunds(version):
        return {}
    wanted = {
        event.data_object.get("id")
        for event in events
        if event.data_object.get("object") == "charge" and "refunds" not in event.data_object
    }
    if not wanted:
        return {}
    return _embedded_refunds(wanted, events[0]._state.db or "default")


def _embedded_refunds(charge_ids: set[Any], using: str) -> dict[str, Any]:
    """Each charge's embedded `refunds` list as older versions show it, read in two
    queries for all of them (a charge not found is left out)."""
    charges = list(Charge.objects.using(using).filter(pk__in=charge_ids))
    with_first_refunds(charges, EMBEDDED_REFUNDS + 1)
    return {
        charge.pk: plain(charge, newest_refunds=charge.first_refunds)["refunds"]  # type: ignore[attr-defined]  # set by with_first_refunds
        for charge in charges
    }
