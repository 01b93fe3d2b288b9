"""Signing in: what a person sees when django-axes has locked it (LOGIN_FAILURE_LIMIT),
and the failed attempts, read-only, for whoever looks after staff accounts.

Authenticators (django-otp's devices) get no admin page at all: a password alone must
never be enough to enrol a new second factor, so they are enrolled from the command line
(create_support_agent, enrol_second_factor)."""

from __future__ import annotations

import json

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib import admin
from django.template.response import TemplateResponse
from django_otp.plugins.otp_totp.models import TOTPDevice

from ledger_app.admin.base import ReadOnlyAdmin, clipped

if admin.site.is_registered(TOTPDevice):
    admin.site.unregister(TOTPDevice)


@admin.register(AccessAttempt)
class SignInFailureAdmin(ReadOnlyAdmin):
    """Who is being guessed at, from where, how often. The lock is per address: unlock one
    early from the command line with `manage.py axes_reset_ip ADDRESS`."""

    list_display = ["attempt_time", "username_display", "address", "failures", "path"]
    list_filter = [("attempt_time", admin.DateFieldListFilter)]
    search_fields = ["username", "ip_address"]
    ordering = ["-attempt_time"]
    fields = ["username", "ip_address", "user_agent", "attempt_time", "failures_since_start"]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    @admin.display(description="User name", ordering="username")
    def username_display(self, attempt: AccessAttempt) -> str:
        return clipped(attempt.username, "text")

    @admin.display(description="Address", ordering="ip_address")
    def address(self, attempt: AccessAttempt) -> str:
        return clipped(attempt.ip_address, "text")

    @admin.display(description="Failures", ordering="failures_since_start")
    def failures(self, attempt: AccessAttempt) -> int:
        return attempt.failures_since_start

    @admin.display(description="Path", ordering="path_info")
    def path(self, attempt: AccessAttempt) -> str:
        return clipped(attempt.path_info, "text")


def attempt_str(username, ip_address, user_agent, path_info, request) -> str:
    """How django-axes's log lines name an attempt (AXES_CLIENT_STR_CALLABLE): the user name
    tried, the client's address and the path. The lock counts the address only, and axes
    would name only what it counts; operators also need to see who is being guessed at.
    Values are JSON-quoted, so a user name with a newline cannot write a line of its own."""
    if isinstance(path_info, (list, tuple)):
        path_info = path_info[0] if path_info else ""
    if isinstance(username, str):
        username = username[:255]  # what the attempt's row keeps
    named = {"username": username, "ip_address": ip_address, "path_info": path_info}
    return "{" + ", ".join(f"{name}: {json.dumps(value)}" for name, value in named.items()) + "}"


def locked_out(request, original_response=None, credentials=None):
    """429 with the admin's look, saying for how long and who can unlock it."""
    minutes = settings.AXES_COOLOFF_TIME.total_seconds() / 60
    context = {**admin.site.each_context(request), "title": "Signing in is locked for a while"}
    context["minutes"] = f"{minutes:g}"
    response = TemplateResponse(request, "admin/locked_out.html", context, status=429)
    return response.render()
