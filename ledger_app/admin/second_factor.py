"""Two factors for whoever changes anything in the admin.

A password opens the admin to look; it changes nothing. Every admin request that can change
data (any method but GET, HEAD and OPTIONS) first asks for a code from the person's
authenticator app (TOTP, django-otp), and asks again after ADMIN_OTP_IDLE_MINUTES without
one: write_gate.AdminWriteGateMiddleware applies `second_factor_gate` to all of them, with
a short list of exempt URL names (signing in and out, the code page, one's own time zone).
Pages that draw a money-moving form ask for the code before they are shown (the refund
form), and an admin's `money_actions` are gated by its changelist too (ReadOnlyAdmin).

The idle time counts from the last code or the last money move, nothing else: opening pages
(the refund form included) and other admin changes never restart it. A money move is a
money-moving write (the refund form's submit, a `money_actions` action) that went through,
told by its answer being the redirect the admin makes after acting (POST/redirect/GET);
write_gate.AdminWriteGateMiddleware restarts the clock then, in one place (`money_moved`).

The code is asked on its own page, /admin/verify/?next=<where the person was going>; a
form posted without a fresh factor is not acted on. What was typed is held in the session
for that page (`hold_form`; never a password, secret, token or code field) and the page,
opened again after the code, draws the form with it (`take_held_form`): the person checks
it and submits again (the refund form's key is in its URL and held, so it is the same form).
"""

from __future__ import annotations

import json
import logging
import math
import time

import django_otp
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpResponseRedirect, QueryDict
from django.shortcuts import resolve_url
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django_otp.plugins.otp_totp.models import TOTPDevice

log = logging.getLogger("ledger_app.admin.second_factor")

# When the person last showed a code, or last moved money with a fresh one (epoch seconds).
FRESH_AT = "second_factor_at"
# Forms posted without a fresh factor, by path: {path: {"at": epoch, "data": [[name, [values]]]}}.
HELD = "second_factor_held_forms"
HELD_MAX_FORMS = 3  # the oldest is dropped past this
HELD_MAX_BYTES = 8_000  # a larger form is not held (it is typed again)
# A field whose name holds one of these is never held.
NEVER_HELD = ("password", "secret", "token", "code")
# Set on a request the gate let through / that can move money (write_gate reads them).
PASSED = "second_factor_passed"
MOVES_MONEY = "second_factor_moves_money"
# The admin URLs whose writes move money (besides `money_actions`, see money_action_gate).
MONEY_URL_NAMES = frozenset({f"{admin.site.name}:ledger_app_charge_refund"})


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
    """None when the request may change data or move money (the idle clock is left as it
    is: only a code or a money move restarts it); otherwise the redirect to the code page,
    which comes back to `next_url` (default: this page), with a posted form held."""
    if is_fresh(request):
        setattr(request, PASSED, True)
        return None
    log.info(
        "second factor asked of %s for %s %s",
        request.user.get_username(),
        request.method,
        request.path,
    )
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        held = hold_form(request)
        messages.warning(
            request,
            "Nothing was done: enter a code from your authenticator app, then check the "
            "form and submit it again."
            if held
            else "Nothing was done: enter a code from your authenticator app, then submit again.",
        )
    return HttpResponseRedirect(verify_url(next_url or request.get_full_path()))


def money_moved(request) -> None:
    """A money-moving write went through: the idle time counts from now."""
    request.session[FRESH_AT] = time.time()


def held_field(name: str) -> bool:
    lowered = name.lower()
    return not any(word in lowered for word in NEVER_HELD)


def hold_form(request) -> bool:
    """Keep what `request` posted (its fields but a password, secret, token or code; no
    files) for its path until the page is opened again after the code, or the idle time
    passes. One form per path, the latest; False when there is nothing to hold or it is too
    large to."""
    data = [[name, request.POST.getlist(name)] for name in request.POST if held_field(name)]
    if not data or len(json.dumps(data)) > HELD_MAX_BYTES:
        return False
    held = {
        path: entry
        for path, entry in request.session.get(HELD, {}).items()
        if path != request.path and not _expired(entry)
    }
    held[request.path] = {"at": time.time(), "data": data}
    newest = sorted(held.items(), key=lambda item: item[1]["at"])[-HELD_MAX_FORMS:]
    request.session[HELD] = dict(newest)
    return True


def take_held_form(request) -> QueryDict | None:
    """What was typed into this page's form before the code page, once (it is dropped when
    taken); None when nothing is held for this path, or it is older than the idle time."""
    held = request.session.get(HELD)
    if not held or request.path not in held:
        return None
    entry = held.pop(request.path)
    request.session[HELD] = held
    if _expired(entry):
        return None
    data = QueryDict(mutable=True)
    for name, values in entry["data"]:
        data.setlist(name, values)
    return data


def _expired(entry: dict) -> bool:
    return time.time() - entry["at"] > settings.ADMIN_OTP_IDLE_MINUTES * 60


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
        setattr(request, MOVES_MONEY, True)
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
        allowed, throttle = device.verify_is_allowed()
        if not allowed:
            log.warning("second factor throttled for %s", request.user.get_username())
            form.add_error("code", throttled_words(throttle))
        elif device.verify_token(form.cleaned_data["code"].strip()):
            django_otp.login(request, device)
            # A new session key for the new privilege, as Django's login gives one for the
            # password: a session id seen or planted before the code moves no money.
            request.session.cycle_key()
            request.session[FRESH_AT] = time.time()
            log.info("second factor verified for %s", request.user.get_username())
            return HttpResponseRedirect(next_url)
        else:
            log.warning("second factor refused for %s", request.user.get_username())
            form.add_error("code", "That code is not right: enter the code your app shows now.")
    context = {
        **admin.site.each_context(request),
        "title": "Enter your code",
        "form": form,
        "next": next_url,
        "enrolled": device is not None,
        "idle_minutes": settings.ADMIN_OTP_IDLE_MINUTES,
    }
    return TemplateResponse(request, "admin/verify_second_factor.html", context)


def throttled_words(throttle: dict | None) -> str:
    """What a person is told while django-otp refuses to check codes after wrong ones: how
    long to wait, from the device's `locked_until` (at least 1 second)."""
    locked_until = (throttle or {}).get("locked_until")
    wait = 1
    if locked_until is not None:
        wait = max(1, math.ceil((locked_until - timezone.now()).total_seconds()))
    unit = "second" if wait == 1 else "seconds"
    return f"Too many wrong codes: wait {wait} {unit}, then enter the code your app shows."
