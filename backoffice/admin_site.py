"""The admin site, as Django documents replacing it: an AdminSite subclass named by an
AdminConfig subclass in INSTALLED_APPS (settings.py), so `django.contrib.admin.site` is an
instance of it from the first registration on.

It lives in backoffice/, not in ledger_app/admin/, because Django imports it while it sets
the site up: importing anything under ledger_app.admin first runs that package's
__init__, whose admins register on the site that is still being set up, and their
registrations would be lost. So the lookup guard (ledger_app/admin/lookups.py) is taken
up in `ready()`, once every app's admins have registered: those are registered again with
it, and any later registration gets it from `register`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

from serving.logs import bind


class BackOfficeAdminSite(admin.AdminSite):
    # What every admin page calls itself: the header, the browser tab ("Log in | Refund back
    # office") and the home page's heading.
    site_header = "Refund back office"
    guard: Callable[[type], type] | None = None
    site_title = "Refund back office"
    index_title = "Home"

    def register(
        self,
        model_or_iterable: Any,
        admin_class: type[admin.ModelAdmin[Any]] | None = None,
        **options: Any,
    ) -> None:
        """Registers with the lookup guard first in the admin's classes, once the site has it
        (`guard_every_admin`)."""
        chosen = admin_class or admin.ModelAdmin
        super().register(model_or_iterable, self.guard(chosen) if self.guard else chosen, **options)

    def guard_every_admin(self, guard: Callable[[type], type]) -> None:
        """From now on every admin on the site has `guard`'s class first in its classes:
        those registered so far (Django's, django-axes', django-otp's, ours) again with it."""
        self.guard = guard
        for model, model_admin in list(self._registry.items()):
            guarded = guard(type(model_admin))
            if guarded is not type(model_admin):
                self.unregister(model)
                super().register(model, guarded)

    def has_permission(self, request: HttpRequest) -> bool:
        """The check every admin page passes (AdminSite.admin_view): once it admits a staff
        member, the rest of the request's log lines name them."""
        admitted = super().has_permission(request)
        if admitted:
            bind(staff_user=request.user.get_username())
        return admitted


class BackOfficeAdminConfig(AdminConfig):
    """django.contrib.admin with BackOfficeAdminSite as its default site."""

    default_site = "backoffice.admin_site.BackOfficeAdminSite"

    def ready(self) -> None:
        super().ready()  # every app's admin module, registered
        from ledger_app.admin.lookups import guarded_admin_class

        site = admin.site
        assert isinstance(site, BackOfficeAdminSite)
        site.guard_every_admin(guarded_admin_class)
