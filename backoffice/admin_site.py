"""The admin site, as Django documents replacing it: an AdminSite subclass named by an
AdminConfig subclass in INSTALLED_APPS (settings.py), so `django.contrib.admin.site` is an
instance of it from the first registration on.

It lives in backoffice/, not in ledger_app/admin/, because Django imports it while it sets
the site up: importing anything under ledger_app.admin first runs that package's
__init__, whose admins register on the site that is still being set up, and their
registrations would be lost. This module imports nothing from ledger_app."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

from serving.logs import bind


class BackOfficeAdminSite(admin.AdminSite):
    # What every admin page calls itself: the header, the browser tab ("Log in | Refund back
    # office") and the home page's heading.
    site_header = "Refund back office"
    site_title = "Refund back office"
    index_title = "Home"

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
