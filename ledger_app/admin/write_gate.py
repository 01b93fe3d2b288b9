"""A fresh second factor for every admin request that can change data, in one place: any
method but GET, HEAD and OPTIONS to an admin URL, unless its URL name is on EXEMPT. Also the
one place where a money move restarts the second factor's idle clock."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.cache import add_never_cache_headers

from ledger_app.admin.second_factor import (
    MONEY_URL_NAMES,
    MOVES_MONEY,
    PASSED,
    money_moved,
    second_factor_gate,
)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The admin's answer to a write it acted on (POST/redirect/GET); a form drawn again (with
# its errors, or a confirmation page) is a 200, and moved no money.
ACTED = frozenset({301, 302, 303})

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
    to the page they posted to; the form's typed values are held for it (second_factor).

    After the view: a money-moving write (a refund form, a `money_actions` action) the gate
    let through and the admin acted on restarts the idle clock. Opening pages and other
    admin changes leave it: the idle time counts from the last code or money move.

    Someone not signed in is let through to the admin's own check, which sends every admin
    view but the sign-in page to sign in: there is no second factor to ask of them yet."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            getattr(request, MOVES_MONEY, False)
            and getattr(request, PASSED, False)
            and request.method not in SAFE_METHODS
            and response.status_code in ACTED
        ):
            money_moved(request)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not is_admin_write(request) or not request.user.is_authenticated:
            return None
        if request.resolver_match.view_name in MONEY_URL_NAMES:
            setattr(request, MOVES_MONEY, True)
        denied = second_factor_gate(request)
        if denied is not None:
            add_never_cache_headers(denied)
        return denied
