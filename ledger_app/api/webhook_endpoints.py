"""/v1/webhook_endpoints: where client systems want events sent, in Stripe's shape, so
stripe.WebhookEndpoint and the client's v1.webhook_endpoints work unchanged. The signing
secret is in the create response only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.urls import path
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ledger_app import errors
from ledger_app.api.authentication import client_of
from ledger_app.api.fields import (
    MAX_ID_LENGTH,
    Expand,
    Flag,
    Metadata,
    OnlyValue,
    Strings,
    Text,
    could_be_an_id,
)
from ledger_app.api.params import ListParams, Params, RetrieveParams, create_body
from ledger_app.api.shared import ERRORS, checked_params, listing, read_schema
from ledger_app.api.versions import StripeView
from ledger_app.events.endpoints import (
    ALL_EVENTS,
    EndpointChanges,
    create_endpoint,
    delete_endpoint,
    update_endpoint,
)
from ledger_app.events.event_types import STRIPE_EVENT_TYPES
from ledger_app.events.models import WebhookEndpoint
from ledger_app.events.selectors import webhook_endpoint, webhook_endpoints
from ledger_app.rendering.fields import BlankAsNull, StripeList, unix

F = TypeVar("F", bound=Callable[..., Any])  # a view method write_schema decorates

LIST_URL = "/v1/webhook_endpoints"


# --- parameters ------------------------------------------------------------------------


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "enum": [ALL_EVENTS, *sorted(STRIPE_EVENT_TYPES)]},
    }
)
class EnabledEvents(Strings):
    """enabled_events[]=... (or enabled_events[0]=...): event types, or "*" for all. Which
    are known is the service's rule."""


@create_body("WebhookEndpointCreate", "Send events of `enabled_events` to `url`.")
class WebhookEndpointCreateParams(Params):
    expand = Expand()
    url = Text(help_text="http:// or https://, on a public address.")
    enabled_events = EnabledEvents(help_text='Event types, or "*" for all.')
    description = Text(required=False, null_as_absent=True)
    metadata = Metadata(required=False, null_as_absent=True)
    api_version = Text(
        required=False,
        help_text="The Stripe API version its events are rendered in: any published one; "
        "omitted: the account's default (DEFAULT_API_VERSION), as Stripe's.",
    )
    connect = OnlyValue(
        False,
        why="the back office has no connected accounts",
        required=False,
        help_text="false (the default): events of this account. true is refused.",
    )


@create_body("WebhookEndpointUpdate", "Change what is sent, and where; or disable it.")
class WebhookEndpointUpdateParams(Params):
    expand = Expand()
    url = Text(required=False)
    enabled_events = EnabledEvents(required=False)
    description = Text(required=False, null_as_absent=True)
    metadata = Metadata(
        required=False, null_as_absent=True, help_text="Merged in; a key sent empty is removed."
    )
    disabled = Flag(required=False, help_text="true: send nothing until it is false again.")


# --- responses -------------------------------------------------------------------------


class WebhookEndpointSerializer(serializers.Serializer):
    """Stripe's webhook_endpoint. `secret` is only in the answer to the create."""

    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    api_version = serializers.SerializerMethodField()
    application = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField()
    description = BlankAsNull()
    enabled_events = serializers.ListField(child=serializers.CharField())
    livemode = serializers.SerializerMethodField()
    metadata = serializers.DictField(child=serializers.CharField())
    secret = serializers.CharField(required=False, help_text="Only when it is created.")
    status = serializers.CharField(help_text="enabled or disabled.")
    url = serializers.CharField()

    def get_object(self, endpoint: WebhookEndpoint) -> str:
        return "webhook_endpoint"

    def get_api_version(self, endpoint: WebhookEndpoint) -> str:
        return endpoint.api_version

    def get_application(self, endpoint: WebhookEndpoint) -> str | None:
        return None

    def get_created(self, endpoint: WebhookEndpoint) -> int:
        return unix(endpoint.created_at)

    def get_livemode(self, endpoint: WebhookEndpoint) -> bool:
        return False

    def to_representation(self, endpoint: WebhookEndpoint) -> dict[str, Any]:
        data = super().to_representation(endpoint)
        if not self.context.get("with_secret"):
            del data["secret"]
        return data


class WebhookEndpointListSerializer(StripeList):
    data = WebhookEndpointSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


class DeletedWebhookEndpointSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField(default="webhook_endpoint")
    deleted = serializers.BooleanField(default=True)


# --- views -----------------------------------------------------------------------------


def write_schema(
    operation_id: str, params_class: type[Params], response_serializer: type[serializers.Serializer]
) -> Callable[[F], F]:
    """A POST with a form or JSON body. Idempotency-Key is not taken here: a retried
    create may make a second endpoint (list them to check)."""
    return extend_schema(
        operation_id=operation_id,
        request={
            "application/x-www-form-urlencoded": params_class,
            "application/json": params_class,
        },
        responses={200: response_serializer, **ERRORS},
    )


def endpoint_or_404(endpoint_id: str) -> WebhookEndpoint:
    """The endpoint the URL names; 404 when there is none or it was deleted."""
    endpoint = webhook_endpoint(endpoint_id) if could_be_an_id(endpoint_id) else None
    if endpoint is None:
        raise errors.ResourceMissing(f"No such webhook endpoint: '{endpoint_id[:MAX_ID_LENGTH]}'")
    return endpoint


class WebhookEndpointsView(StripeView):
    path_param = None

    @read_schema("webhook_endpoints_list", WebhookEndpointListSerializer, ListParams)
    def get(self, request: Request) -> Response:
        params = checked_params(ListParams, request.query_params)
        return listing(request, webhook_endpoints(), params, WebhookEndpointSerializer, LIST_URL)

    @write_schema(
        "webhook_endpoints_create", WebhookEndpointCreateParams, WebhookEndpointSerializer
    )
    def post(self, request: Request) -> Response:
        params = checked_params(WebhookEndpointCreateParams, request.data)
        endpoint = create_endpoint(
            url=params["url"],
            enabled_events=params["enabled_events"],
            description=params.get("description"),
            metadata=params.get("metadata"),
            api_version=params.get("api_version"),
            api_key=client_of(request).key,
        )
        return Response(WebhookEndpointSerializer(endpoint, context={"with_secret": True}).data)


class WebhookEndpointView(StripeView):
    path_param = "webhook_endpoint"

    @read_schema("webhook_endpoints_retrieve", WebhookEndpointSerializer, RetrieveParams)
    def get(self, request: Request, endpoint_id: str) -> Response:
        checked_params(RetrieveParams, request.query_params)
        return Response(WebhookEndpointSerializer(endpoint_or_404(endpoint_id)).data)

    @write_schema(
        "webhook_endpoints_update", WebhookEndpointUpdateParams, WebhookEndpointSerializer
    )
    def post(self, request: Request, endpoint_id: str) -> Response:
        params = checked_params(WebhookEndpointUpdateParams, request.data)
        params.pop("expand", None)
        endpoint = update_endpoint(endpoint_or_404(endpoint_id).pk, EndpointChanges(**params))
        return Response(WebhookEndpointSerializer(endpoint).data)

    @read_schema("webhook_endpoints_delete", DeletedWebhookEndpointSerializer)
    def delete(self, request: Request, endpoint_id: str) -> Response:
        checked_params(Params, request.query_params)
        endpoint = delete_endpoint(endpoint_or_404(endpoint_id).pk)
        return Response(DeletedWebhookEndpointSerializer({"id": endpoint.pk}).data)


urlpatterns = [
    path("webhook_endpoints", WebhookEndpointsView.as_view(), name="webhook_endpoints"),
    path(
        "webhook_endpoints/<str:endpoint_id>",
        WebhookEndpointView.as_view(),
        name="webhook_endpoint",
    ),
]
