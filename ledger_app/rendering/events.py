"""An event as Stripe shapes it, in the API's answers and in a webhook delivery's body: its
object in the API version asked for (a charge's refunds embedded before 2022-11-15, read
now when its snapshot was taken without them), and the snapshots recorded before
`ledger_status` existed shown in Stripe's values."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ledger_app import api_versions
from ledger_app.charges.models import Charge, MovementStatus
from ledger_app.events.models import Event
from ledger_app.refunds.selectors import with_first_refunds
from ledger_app.rendering.charges import EMBEDDED_REFUNDS, refund_list
from ledger_app.rendering.fields import StripeList, shown_status, unix
from ledger_app.rendering.refunds import FAILURE_REASONS


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


def delivery_body(event: Event, version: str) -> str:
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
        charge.pk: refund_list(charge, charge.first_refunds, EMBEDDED_REFUNDS)  # type: ignore[attr-defined]  # set by with_first_refunds
        for charge in charges
    }
