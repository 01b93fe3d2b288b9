from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("v1/", include("ledger_app.api.urls")),
]

handler500 = "backoffice.request_id.server_error"
