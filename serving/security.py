"""Response hardening that no library setting covers."""

from __future__ import annotations

from django.utils.cache import patch_cache_control

API_PREFIX = "/v1/"


class ApiNoStoreMiddleware:
    """Every API response (objects, lists, errors, the schema) says `Cache-Control:
    no-store`: a charge or refund read once is never served again from a cache."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path.startswith(API_PREFIX) or request.path == API_PREFIX.rstrip("/"):
            patch_cache_control(response, no_store=True)
        return response
