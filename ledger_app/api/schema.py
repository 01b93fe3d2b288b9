"""Touches to the generated OpenAPI schema that the views cannot express."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "ledger_app.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (sk_...) from `manage.py create_api_key`, as a Bearer "
            "token or as the user name of HTTP Basic.",
        }


def optional_expansions(result, generator, request, public):
    """Expansions as clients use them: `refunds` appears on a charge only with
    expand[]=refunds, and a list in a query is sent with brackets (expand[]=refunds, as
    parsing.fold reads it) where the serializer's field is plain `expand`."""
    charge = result.get("components", {}).get("schemas", {}).get("Charge", {})
    if "refunds" in charge.get("required", []):
        charge["required"].remove("refunds")
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and parameter["schema"].get("type") == "array":
                    parameter["name"] += "[]"
    return result
