"""Events and webhooks in the admin: the event log, the endpoints (never their secrets: not
shown, not read, not filtered) and every delivery with its status, attempts and last answer.
"Resend" puts deliveries back in the queue, for staff with the resend permission."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import BooleanField, Case, F, Subquery, Value, When

from ledger_app.admin.base import ReadOnlyAdmin, clipped
from ledger_app.admin.filters import exact_id_search
from ledger_app.counts import count_of
from ledger_app.errors import LedgerError
from ledger_app.events import checks as webhook_checks
from ledger_app.events.endpoints import resend_delivery
from ledger_app.events.models import Event, WebhookDelivery, WebhookEndpoint
from ledger_app.events.selectors import enabled_endpoints_past_the_limit, receiving_endpoints

RESEND_PERMISSION = "ledger_app.resend_webhookdelivery"
MAX_SELECTED = 500  # deliveries one Resend acts on


class LogAdmin(ReadOnlyAdmin):
    """Newest first, every field shown read-only, and a search box that finds the exact
    ids in `exact_search`."""

    ordering = ["-created_at", "-id"]
    search_fields = ["id"]  # shows the box; the search itself is exact_id_search
    exact_search: tuple[str, ...] = ("pk",)

    def get_fields(self, request, obj=None):
        return self.readonly_fields

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, *self.exact_search)


@admin.register(Event)
class EventAdmin(LogAdmin):
    list_display = ["id", "type", "created_at", "charge_display", "refund_display"]
    list_filter = ["type", ("created_at", admin.DateFieldListFilter)]
    search_help_text = "An event id, a charge id or a refund id, exactly."
    exact_search = ("pk", "charge_id", "refund_id")
    readonly_fields = [
        "id",
        "type",
        "created_at",
        "charge",
        "refund",
        "request_id",
        "request_idempotency_key",
        "data_object",
        "previous_attributes",
    ]

    @admin.display(description="Charge", ordering="charge_id")
    def charge_display(self, event: Event) -> str:
        return clipped(event.charge_id)

    @admin.display(description="Refund", ordering="refund_id")
    def refund_display(self, event: Event) -> str:
        return clipped(event.refund_id)


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(LogAdmin):
    """Endpoints are made and changed through the API (within its limits per key and in
    all, services/webhook_endpoints.py); the secret is shown only there, once, and never
    here. Each shows the API key that made it, and whether it is sent events: enabled
    ones past the oldest WEBHOOK_ENDPOINTS_TOTAL are not, and the list says how many."""

    list_display = ["id", "url_display", "status", "sent_display", "events_display", "created_at"]
    list_filter = ["status", ("deleted_at", admin.EmptyFieldListFilter)]
    search_help_text = "An endpoint id, exactly."
    exclude = ["secret"]
    readonly_fields = [
        "id",
        "url",
        "status",
        "enabled_events",
        "api_version",
        "description",
        "metadata",
        "api_key",
        "created_at",
        "deleted_at",
        "sent_display",
    ]

    def get_queryset(self, request):
        # Never read here, so never decrypted here either (ledger_app/encryption.py).
        # Whether each is among the oldest WEBHOOK_ENDPOINTS_TOTAL enabled ones, the only
        # endpoints events are written for (selectors.live_endpoints).
        receiving = receiving_endpoints().values("pk")
        return (
            super()
            .get_queryset(request)
            .defer("secret")
            .annotate(
                receiving=Case(
                    When(pk__in=Subquery(receiving), then=Value(True)),
                    default=Value(False),
                    output_field=BooleanField(),
                )
            )
        )

    def changelist_view(self, request, extra_context=None):
        past = enabled_endpoints_past_the_limit()
        if past:
            messages.warning(
                request,
                f"{webhook_checks.past_the_limit_message(past)}. They are marked "
                '"no: past the limit" under Sent events; delete those no longer '
                "used, or raise the setting.",
            )
        return super().changelist_view(request, extra_context)

    @admin.display(description="Sent events")
    def sent_display(self, endpoint: WebhookEndpoint) -> str:
        if endpoint.deleted_at is not None:
            return "no: deleted"
        if endpoint.status != WebhookEndpoint.Status.ENABLED:
            return "no: disabled"
        if getattr(endpoint, "receiving", True):
            return "yes"
        return f"no: past the limit (WEBHOOK_ENDPOINTS_TOTAL, {settings.WEBHOOK_ENDPOINTS_TOTAL})"

    @admin.display(description="URL", ordering="url")
    def url_display(self, endpoint: WebhookEndpoint) -> str:
        return clipped(endpoint.url, "wide")

    @admin.display(description="Events")
    def events_display(self, endpoint: WebhookEndpoint) -> str:
        return clipped(", ".join(endpoint.enabled_events), "text")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(LogAdmin):
    # What a Resend is decided on; the event, the endpoint and when it was delivered are
    # on the delivery's page (and the search finds deliveries by event or endpoint id).
    list_display = [
        "id",
        "status",
        "event_type",
        "attempts",
        "last_answer",
        "next_attempt_at",
        "created_at",
    ]
    list_filter = ["status", ("created_at", admin.DateFieldListFilter)]
    search_help_text = "An event id or an endpoint id, exactly."
    exact_search = ("event_id", "endpoint_id")
    readonly_fields = [
        "id",
        "event",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "leased_until",
        "delivered_at",
        "created_at",
    ]
    actions = ["resend"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(type_of_event=F("event__type"))

    @admin.display(description="Event type", ordering="type_of_event")
    def event_type(self, delivery) -> str:
        return delivery.type_of_event

    @admin.display(description="Last answer")
    def last_answer(self, delivery) -> str:
        code = delivery.last_status_code
        answer = f"{code}: {delivery.last_error}" if code else delivery.last_error
        return clipped(answer, "wide")

    def has_resend_permission(self, request) -> bool:
        return request.user.has_perm(RESEND_PERMISSION)

    @admin.action(permissions=["resend"], description="Resend (send again now)")
    def resend(self, request, queryset):
        resent, refused = [], []
        ids = queryset.order_by("pk").values_list("pk", flat=True)[:MAX_SELECTED]
        for delivery_id in ids:
            try:
                delivery = resend_delivery(delivery_id)
            except LedgerError as exc:
                refused.append(f"{delivery_id} ({exc.message})")
                continue
            self.log_change(request, delivery, "Resend: queued to be sent again")
            resent.append(str(delivery_id))
        if resent:
            counted = count_of(len(resent), "delivery", "deliveries")
            self.message_user(
                request,
                f"Queued to be sent again: {counted} — {', '.join(resent)}",
                messages.SUCCESS,
            )
        if refused:
            counted = count_of(len(refused), "delivery", "deliveries")
            self.message_user(
                request, f"Not resent: {counted} — {', '.join(refused)}", messages.WARNING
            )
