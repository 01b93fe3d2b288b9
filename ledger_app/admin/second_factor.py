"""Two factors for whoever changes anything in the admin.

A password opens the admin to look; it changes nothing. Every admin request that can change
data (any method but GET, HEAD and OPTIONS) first asks for a code from the person's
authenticator app (TOTP, django-otp), and asks again after ADMIN_OTP_IDLE_MINUTES without
one: write_gate.AdminWriteGateMiddleware applies `second_factor_gate` to all of them, with
a short list of exempt URL names (signing in and out, the code page, one's own time zone).
Pages that draw a money-moving form ask for the code before they are shown (the refund
form), and an admin's `money_actions` are gated by its changelist too (ReadOnlyAdmin).

The code is asked on its own page, /admin/verify/?next=<where the person was going>; a
form posted without a fresh factor is not acted on (the person comes back to the page they
posted to; the refund form's key is in its URL, so it is the same form).
"""

from __future__ import annotations

import logging
import time

import django_otp
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import resolve_url
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django_otp.plugins.otp_totp.models import TOTPDevice

log = logging.getLogger("ledger_app.admin.second_factor")

# When the person last showed a code, or last changed something with a fresh one (epoch
# seconds).
FRESH_AT = "second_factor_at"


def is_fresh(request) -> bool:
    """A code from this person's own device, in this session, within the idle time."""
    if not settings.ADMIN_OTP_REQUIRED:
        return True
    user = request.user
    if not getattr(user, "is_verified", lambda: False)():
        return False
    last = request.session.get(FRESH_AT)
    return last is not None and time.time() - last <= settings.ADMIN_OTP_IDLE_MINUTES * 60


def verify_url(next_url: str) -> str:
    return f"{reverse('verify-second-factor')}?{urlencode({'next': next_url})}"


def second_factor_gate(request, next_url: str | None = None) -> HttpResponseRedirect | None:
    """None when the request may change data or move money (and the idle clock restarts);
    otherwise the redirect to the code page, which comes back to `next_url` (default: this
    page)."""
    if is_fresh(request):
        request.session[FRESH_AT] = time.time()
        return None
    log.info(
        "second factor asked of %s for %s %s",
        request.user.get_username(),
        request.method,
        request.path,
    )
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        messages.warning(
            request,
            "Nothing was done: enter a code from your authenticator app, then submit again.",
        )
    return HttpResponseRedirect(verify_url(next_url or request.get_full_path()))


def money_action_gate(model_admin, request) -> HttpResponseRedirect | None:
    """For a changelist request: when it names one of the admin's `money_actions` that this
    person may run, the second factor's gate; otherwise None. Every `action` value counts,
    not just one: Django runs the first of several (`action` appears once per action bar),
    so a post naming a money action anywhere is gated."""
    if request.method != "POST":
        return None
    permitted = model_admin.get_actions(request)
    named = set(request.POST.getlist("action"))
    if any(action in model_admin.money_actions and action in permitted for action in named):
        return second_factor_gate(request, request.get_full_path())
    return None


class CodeForm(forms.Form):
    code = forms.CharField(
        label="Code from your authenticator app",
        max_length=8,
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}
        ),
    )


def _safe_next(request) -> str:
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return wanted
    return resolve_url("admin:index")


def verify_view(request):
    """The code page: a code from the person's own device makes the session fresh."""
    device = TOTPDevice.objects.filter(user=request.user, confirmed=True).first()
    next_url = _safe_next(request)
    form = CodeForm(request.POST or None)
    if request.method == "POST" and device is not None and form.is_valid():
        allowed, _ = device.verify_is_allowed()
        if allowed and device.verify_token(form.cleaned_data["code"].strip()):
            django_otp.login(request, device)
            request.session[FRESH_AT] = time.time()
            log.info("second factor verified for %s", request.user.get_username())
            return HttpResponseRedirect(next_url)
        log.warning("second factor refused for %s", request.user.get_username())
        form.add_error(
            "code",
            "That code is not right, or too many wrong codes were tried: wait a few "
            "seconds and enter the code your app shows now.",
        )
    context = {
        **admin.site.each_context(request),
        "title": "Enter your code",
        "form": form,
        "next": next_url,
        "enrolled": device is not None,
        "idle_minutes": settings.ADMIN_OTP_IDLE_MINUTES,
    }
    return TemplateResponse(request, "admin/verify_second_factor.html", context)
