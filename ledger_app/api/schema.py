"""Touches to the generated OpenAPI schema that the views cannot express."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)

if TYPE_CHECKING:  # api/authentication.py imports this module while DRF's views load
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.utils import Direction
    from rest_framework.request import Request


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "ledger_app.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (sk_...) from `manage.py create_api_key`, as a Bearer "
            "token or as the user name of HTTP Basic.",
        }


class FixedFieldSchema(OpenApiSerializerFieldExtension):
    """A field that is always the same value (rendering/fields.py's Fixed) carries its schema."""

    target_class = "ledger_app.rendering.fields.Fixed"

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        return dict(self.target.schema)


class ExpandableIdSchema(OpenApiSerializerFieldExtension):
    """An id that expand[] may replace by its object: the id, or the object."""

    target_class = "ledger_app.rendering.fields.ExpandableId"

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        return {
            "oneOf": [
                {"type": "string"},
                {"$ref": f"#/components/schemas/{self.target.component}"},
            ],
            "nullable": True,
        }


class ExpandSchema(OpenApiSerializerFieldExtension):
    """expand[]: the fields this endpoint expands, by name."""

    target_class = "ledger_app.api.fields.Expand"

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        if not self.target.allowed:
            return {"type": "array", "items": {"type": "string"}, "maxItems": 0}
        return {"type": "array", "items": {"type": "string", "enum": sorted(self.target.allowed)}}


def fields_left_out(
    result: dict[str, Any], generator: SchemaGenerator, request: Request | None, public: bool
) -> dict[str, Any]:
    """Fields Stripe leaves out when they have no value (StripeObject.LEFT_OUT_WHEN_NULL)
    are not required: drf-spectacular marks every read-only field required."""
    from ledger_app.rendering.fields import StripeObject

    schemas = result.get("components", {}).get("schemas", {})
    for serializer in StripeObject.__subclasses__():
        component = schemas.get(serializer.__name__.removesuffix("Serializer"), {})
        left_out = {*serializer.LEFT_OUT_WHEN_NULL, *getattr(serializer, "OPTIONAL_FIELDS", ())}
        if "required" in component and left_out:
            component["required"] = [n for n in component["required"] if n not in left_out]
    return result


def optional_expansions(
    result: dict[str, Any], generator: SchemaGenerator, request: Request | None, public: bool
) -> dict[str, Any]:
    """Bracketed query parameters as clients send them: a list with brackets
    (expand[]=refunds, types[]=charge.succeeded, as parsing.fold and params.fold read
    them) where the serializer's field is plain `expand`, and an object as
    created[gt]=... (deepObject)."""
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "query":
                    continue
                kind = parameter["schema"].get("type")
                if kind == "array":
                    parameter["name"] += "[]"
                elif kind == "object":
                    parameter["style"], parameter["explode"] = "deepObject", True
    return result
