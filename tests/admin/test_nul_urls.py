"""A NUL in an admin object URL names no object: 404, never a 500 from PostgreSQL (which
refuses NUL in any text it is asked to compare) and never a redirect saying the object
"was perhaps deleted". Enumerated from the admin registry, so a new admin is covered."""

from __future__ import annotations

import logging

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.db import DataError, connection, transaction
from django.http import Http404
from django.test import RequestFactory

from ledger_app.admin import ReadOnlyAdmin
from ledger_app.models import Charge, Refund

pytestmark = pytest.mark.django_db

OBJECT_PAGES = ["change", "history", "delete"]
EXTRA_PAGES = {Charge: ["refund"], User: ["password"]}
# NUL alone, and NUL inside an id that would otherwise look real.
NUL_IDS = ["%00", "ch_%00", "%00re_x", "1%00"]


def admin_prefix(model) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def nul_urls() -> list[str]:
    urls = []
    for model in admin.site._registry:
        for object_id in NUL_IDS:
            for page in OBJECT_PAGES + EXTRA_PAGES.get(model, []):
                urls.append(f"{admin_prefix(model)}{object_id}/{page}/")
            urls.append(f"{admin_prefix(model)}{object_id}/")  # the old form of the change URL
    return urls


def test_the_registry_holds_the_admins_this_file_is_about():
    models = {f"{m._meta.app_label}.{m._meta.model_name}" for m in admin.site._registry}
    assert {
        "ledger_app.charge",
        "ledger_app.refund",
        "ledger_app.refundattention",
        "ledger_app.ledgerentry",
        "ledger_app.idempotencyrecord",
        "ledger_app.apikey",
        "auth.user",
        "auth.group",
    } <= models


def test_every_admin_of_this_project_is_read_only_and_so_refuses_nul_ids():
    """The ledger's and the simulated provider's admins all inherit ReadOnlyAdmin; the
    rest (Django's users and groups) are covered by the URL configuration."""
    ours = {m: a for m, a in admin.site._registry.items() if m._meta.app_label != "auth"}
    assert ours and all(isinstance(a, ReadOnlyAdmin) for a in ours.values()), ours
    assert {m for m in admin.site._registry if m not in ours} == {User, Group}


def test_nul_in_any_admin_object_url_is_404_for_a_superuser(
    admin_client, charge_with_a_refund, caplog
):
    caplog.set_level(logging.INFO)
    before = (Charge.objects.count(), Refund.objects.count())
    urls = nul_urls()

    for url in urls:
        for method in ("get", "post"):
            response = getattr(admin_client, method)(url)

            assert response.status_code == 404, (method, url, response.status_code)

    assert len(urls) >= 10 * len(NUL_IDS) * 4
    assert (Charge.objects.count(), Refund.objects.count()) == before
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]


def test_nul_in_an_admin_url_is_404_for_anyone(client, charge_with_a_refund):
    """No login page in between: such a URL names nothing, whoever asks."""
    for url in ["/admin/ledger_app/charge/%00/change/", "/admin/auth/user/%00/change/"]:
        assert client.get(url).status_code == 404, url


READ_ONLY_ADMINS = [m for m, a in admin.site._registry.items() if isinstance(a, ReadOnlyAdmin)]


@pytest.mark.parametrize("model", READ_ONLY_ADMINS, ids=lambda m: m._meta.label_lower)
def test_read_only_admins_refuse_nul_ids_themselves(rf: RequestFactory, admin_user, model):
    """ReadOnlyAdmin.get_object refuses such an id before any query, whatever URL asked."""
    model_admin = admin.site._registry[model]
    request = rf.get("/admin/")
    request.user = admin_user

    for object_id in ["\x00", "ch_\x00", "\x00re_x", "1\x00", "\ud800"]:
        with pytest.raises(Http404):
            model_admin.get_object(request, object_id)


def test_real_object_pages_still_open(admin_client, charge_with_a_refund):
    charge, refund = charge_with_a_refund
    charge_id, refund_id = quote(charge.pk), quote(refund.pk)  # ids may hold "_3B" and such

    for url in [
        f"/admin/ledger_app/charge/{charge_id}/change/",
        f"/admin/ledger_app/charge/{charge_id}/history/",
        f"/admin/ledger_app/refund/{refund_id}/change/",
    ]:
        assert admin_client.get(url).status_code == 200, url
    # A missing object: Django's redirect to the index, as before.
    assert admin_client.get("/admin/ledger_app/charge/ch_missing/change/").status_code == 302


@pytest.mark.postgres
def test_on_postgresql_a_nul_id_would_reach_the_database_as_an_error(
    admin_client, charge_with_a_refund
):
    """Why this matters: PostgreSQL refuses NUL in a query outright, so any admin that
    looked such an id up would answer 500."""
    with pytest.raises(DataError), transaction.atomic():
        Charge.objects.filter(pk="\x00").first()
    assert connection.vendor == "postgresql"

    for url in nul_urls():
        assert admin_client.get(url).status_code == 404, url
