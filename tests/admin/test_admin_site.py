"""The admin site is a subclass of AdminSite named by an AdminConfig in INSTALLED_APPS
(backoffice/admin_site.py), as Django documents, not Django's own site patched."""

import logging

import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import Group

from backoffice.admin_site import BackOfficeAdminSite
from ledger_app.models import Refund
from serving.logs import LogContextFilter, log_context

pytestmark = pytest.mark.sqlite_pass


def test_the_admin_site_is_a_back_office_admin_site_with_nothing_patched_on_it():
    assert isinstance(admin.site, BackOfficeAdminSite)
    assert "backoffice.admin_site.BackOfficeAdminConfig" in settings.INSTALLED_APPS
    assert "django.contrib.admin" not in settings.INSTALLED_APPS
    # What was assigned on the instance. django-stubs type admin.site as the AdminSite, not
    # the LazyObject (DefaultAdminSite) around it that it is.
    instance_attributes = vars(admin.site._wrapped)  # type: ignore[attr-defined]
    assert "has_permission" not in instance_attributes
    assert {"site_header", "site_title", "index_title"}.isdisjoint(instance_attributes)


def test_every_admin_registered_on_that_one_site():
    assert Refund in admin.site._registry
    assert Group in admin.site._registry  # Django's own, through the same site


@pytest.mark.django_db
def test_every_admin_page_wears_the_back_office_titles(admin_client):
    response = admin_client.get("/admin/")

    assert response.status_code == 200
    assert response.context["site_header"] == "Refund back office"
    assert response.context["site_title"] == "Refund back office"
    assert response.context["title"] == "Home"


def named_in_a_line() -> dict[str, str]:
    """What a line logged now would name (serving/logs.py, LogContextFilter)."""
    record = logging.LogRecord("test", logging.INFO, __file__, 1, "a line", (), None)
    LogContextFilter().filter(record)
    return {name: getattr(record, name) for name in ("staff_user",) if hasattr(record, name)}


@pytest.mark.django_db
def test_a_staff_member_it_admits_is_named_in_the_requests_log_lines(rf, admin_user):
    request = rf.get("/admin/")
    request.user = admin_user

    with log_context(staff_user=""):  # nobody named before it
        assert admin.site.has_permission(request)

        assert named_in_a_line() == {"staff_user": admin_user.get_username()}


@pytest.mark.django_db
def test_someone_it_refuses_is_not_named(rf, django_user_model):
    request = rf.get("/admin/")
    request.user = django_user_model.objects.create_user("customer", password="x-123456789")

    with log_context(staff_user=""):  # nobody named before it
        assert not admin.site.has_permission(request)

        assert named_in_a_line() == {}
