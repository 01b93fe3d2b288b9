"""/v1/webhook_endpoints: where client systems want events sent."""

from __future__ import annotations

urlpatterns: list = []
