from django.contrib import admin
from django.http import Http404, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from ledger_app.admin.second_factor import verify_view
from ledger_app.admin.time_zone import time_zone_view
from ledger_app.api.errors import not_found
from ledger_app.api.provider_webhooks import stripe_webhook
from ledger_app.metrics.views import metrics_view
from ledger_app.status_page.views import refund_status
from serving import health


def nul_in_admin_url(request, *args, **kwargs):
    """No object's id holds a NUL (PostgreSQL refuses one in any query), so an admin URL
    with one names nothing: 404 before any admin runs, for every admin alike (Django's own
    user and group admins included). The ledger's admins refuse such ids on their own too
    (ReadOnlyAdmin.get_object)."""
    raise Http404("No such object.")


def favicon(request):
    """Browsers ask for /favicon.ico on any page (the API's docs too): the admin's icon."""
    return HttpResponseRedirect(static("ledger_app/favicon.svg"))


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("favicon.ico", favicon),
    # Probes for load balancers: no sign-in, no API key (docs/operating/health-and-logs.md).
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    re_path(r"^admin/[\s\S]*\x00", nul_in_admin_url),
    path("admin/verify/", admin.site.admin_view(verify_view), name="verify-second-factor"),
    path("admin/time-zone/", admin.site.admin_view(time_zone_view), name="admin-time-zone"),
    path("admin/", admin.site.urls),
    path("v1", not_found),  # an unknown URL like any other, not a redirect to /v1/
    path("v1/", include("ledger_app.api.urls")),
    path("webhooks/stripe", stripe_webhook, name="stripe-webhook"),
    # A customer's refund, from the signed link in their mail (docs/customer-mails.md).
    path("refund-status/<str:token>", refund_status, name="refund-status"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus (docs/operating/metrics.md)
]

handler400 = "ledger_app.api.errors.bad_request"
handler500 = "serving.request_id.server_error"
