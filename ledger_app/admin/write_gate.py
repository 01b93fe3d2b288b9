"""A fresh second factor for every admin request that can change data, in one place: any
method but GET, HEAD and OPTIONS to an admin URL, unless its URL name is on EXEMPT."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.cache import add_never_cache_headers

from ledger_app.admin.second_factor import second_factor_gate

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# The only admin posts a password alone may make, by URL name (as `resolve` names them):
# signing in and out, the code page itself, and the person's own time zone (it changes
# nothing but how their own pages read).
EXEMPT = frozenset(
    {
        f"{admin.site.name}:login",
        f"{admin.site.name}:logout",
        "verify-second-factor",
        "admin-time-zone",
    }
)


def is_admin_write(request) -> bool:
    """A request under the admin's URL prefix, or to any view of the admin site's URL
    namespace, with a method that may change data."""
    if request.method in SAFE_METHODS:
        return False
    match = request.resolver_match  # what django.urls.resolve made of this path
    in_admin = admin.site.name in match.namespaces or request.path_info.startswith(
        reverse(f"{admin.site.name}:index")
    )
    return in_admin and match.view_name not in EXEMPT


class AdminWriteGateMiddleware:
    """Runs after the view is resolved (process_view) and before it runs: a write without
    a fresh code is not acted on. The person goes to the code page, which brings them back
    to the page they posted to; the form's typed values are not kept.

    Someone not signed in is let through to the admin's own check, which sends every admin
    view but the sign-in page to sign in: there is no second factor to ask of them yet."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not is_admin_write(request) or not request.user.is_authenticated:
            return None
        denied = second_factor_gate(request)
        if denied is not None:
            add_never_cache_headers(denied)
        return denied
