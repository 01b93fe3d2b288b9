"""The admin's Time zone page: each staff member chooses the zone the admin shows them
times in (ledger_app/access/time_zones.py). Like changing one's own password, it is open to every
staff member and changes nothing but how their own pages read."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils import timezone

from ledger_app.access.models import StaffPreference
from ledger_app.access.time_zones import chosen_zone_name, shown_time, zone_for, zone_names
from ledger_app.admin.forms import CodedChoiceField
from ledger_app.admin.second_factor import _safe_next

UNKNOWN_ZONE = "That is not a time zone this back office knows: choose one from the list."


def zone_choices() -> list[tuple[str, str]]:
    default = ("", f"The back office's default ({settings.ADMIN_TIME_ZONE})")
    return [default, *((name, name.replace("_", " ")) for name in zone_names())]


class TimeZoneForm(forms.Form):
    time_zone = CodedChoiceField(
        code="unknown_time_zone",
        choices=zone_choices,
        required=False,
        label="Show times in",
        error_messages={"invalid_choice": UNKNOWN_ZONE},
    )


def time_zone_view(request):
    """GET: the form, with the zone in use now. POST: save a known zone (or the default)
    and go back where the person came from; anything else is refused and nothing saved."""
    next_url = _safe_next(request)
    if request.method == "POST":
        form = TimeZoneForm(request.POST)
        if form.is_valid():
            name = form.cleaned_data["time_zone"]
            StaffPreference.objects.update_or_create(
                user=request.user, defaults={"time_zone": name}
            )
            shown = name or f"the back office's default, {settings.ADMIN_TIME_ZONE}"
            with timezone.override(zone_for(request.user)):
                now = shown_time(timezone.now())
            messages.success(request, f"Times are now shown in {shown}: it is {now}.")
            return HttpResponseRedirect(next_url)
    else:
        form = TimeZoneForm(initial={"time_zone": chosen_zone_name(request.user)})
    context = {
        **admin.site.each_context(request),
        "title": "Time zone",
        "form": form,
        "next": next_url,
        "now": shown_time(timezone.now()),
        "default_zone": settings.ADMIN_TIME_ZONE,
    }
    return TemplateResponse(request, "admin/time_zone.html", context)
