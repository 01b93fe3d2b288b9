from django.urls import path, re_path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from ledger_app.api import views
from ledger_app.api.errors import not_found

urlpatterns = [
    path("charges", views.ChargesView.as_view(), name="charges"),
    path("charges/<str:charge_id>", views.ChargeView.as_view(), name="charge"),
    path("refunds", views.RefundsView.as_view(), name="refunds"),
    path("refunds/<str:refund_id>", views.RefundView.as_view(), name="refund"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("docs", SpectacularSwaggerView.as_view(url_name="openapi"), name="api-docs"),
    re_path(r"^.*$", not_found),
]
