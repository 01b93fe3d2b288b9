"""What a person sees when django-axes has locked signing in (LOGIN_FAILURE_LIMIT)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.template.response import TemplateResponse


def locked_out(request, original_response=None, credentials=None):
    """429 with the admin's look, saying for how long and who can unlock it."""
    minutes = settings.AXES_COOLOFF_TIME.total_seconds() / 60
    context = {**admin.site.each_context(request), "title": "Signing in is locked for a while"}
    context["minutes"] = f"{minutes:g}"
    response = TemplateResponse(request, "admin/locked_out.html", context, status=429)
    return response.render()
