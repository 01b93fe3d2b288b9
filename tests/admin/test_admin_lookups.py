"""Admin query strings (issue 27, findings 2 and 6): every registered admin answers only the
lookups its filters, search and date hierarchy use, never one that reads a secret or a hash,
and a malformed filter gets Django's own answer to a bad one (the list, "?e=1"), never a 500
and never a count."""

from __future__ import annotations

import importlib
import logging
import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.sites import AdminSite
from django.contrib.auth.admin import GroupAdmin
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ImproperlyConfigured
from django.db import DataError
from django.test import Client, RequestFactory
from django.urls import reverse

from backoffice.admin_site import BackOfficeAdminSite
from ledger_app.admin.base import LargeTablePaginator
from ledger_app.admin.export import CsvExport, export_plan
from ledger_app.models import ApiKey, LedgerEntry, Refund, WebhookDelivery, WebhookEndpoint
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.second_factor import verified

pytestmark = pytest.mark.django_db

# The fields that hold a secret or a hash, listed here on their own (not read from the code
# under test): each must be refused by every admin that can reach it.
SECRETS = {
    "auth.User": ["password"],
    "ledger_app.ApiKey": ["secret_hash"],
    "ledger_app.WebhookEndpoint": ["secret"],
    "otp_totp.TOTPDevice": ["key"],
    "sessions.Session": ["session_data"],
}
LOOKUP_TYPES = [
    "",
    "exact",
    "iexact",
    "startswith",
    "istartswith",
    "endswith",
    "iendswith",
    "contains",
    "icontains",
    "regex",
    "iregex",
    "gt",
    "gte",
    "lt",
    "lte",
    "in",
    "range",
    "isnull",
]
REGISTERED = sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label)
SECRET = "whsec_KnownSecretOfTheClient"


def guard():
    """ledger_app/admin/lookups.py, imported by the tests that use it, so that the others run
    (and fail) on code that has none."""
    return importlib.import_module("ledger_app.admin.lookups")


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def assert_refused(response, model) -> None:
    """Django's own answer to a bad filter: back to the list with "?e=1", nothing counted."""
    # On failure, what the list said: "1 result" for a right guess, "0 results" for a wrong one.
    assert response.status_code == 302, re.findall(rb"\d+ results?", response.content)
    assert response["Location"] == f"{changelist(model)}?e=1"
    assert b"result" not in response.content


def secret_paths(model, depth: int = 2, prefix: str = "") -> list[str]:
    """Every lookup path from `model` to a secret field, through up to `depth` relations
    (forward and reverse): "secret", "endpoint__secret", "user__password", ..."""
    paths = [f"{prefix}{name}" for name in SECRETS.get(model._meta.label, [])]
    if depth:
        for field in model._meta.get_fields():
            if field.is_relation and field.related_model is not None:
                paths += secret_paths(field.related_model, depth - 1, f"{prefix}{field.name}__")
    return paths


def lookup(path: str, lookup_type: str) -> str:
    return f"{path}__{lookup_type}" if lookup_type else path


SECRET_LOOKUPS = [
    pytest.param(model, path, id=f"{model._meta.label}:{path}")
    for model, _ in REGISTERED
    for path in sorted(set(secret_paths(model)))
]
CONCRETE_FIELDS = [
    pytest.param(model, field.name, id=f"{model._meta.label}.{field.name}")
    for model, _ in REGISTERED
    for field in model._meta.concrete_fields
]


@pytest.fixture
def endpoint(db):
    return WebhookEndpoint.objects.create(
        url="https://hooks.example.com/refunds", enabled_events=["*"], secret=SECRET
    )


def staff_who_may_view(django_user_model, *codenames: str) -> Client:
    """A support agent with view permission on these models, and a code entered."""
    user = django_user_model.objects.create_user("looker", password="looker-pass-1", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return verified(Client(), user)


class TestTheSecretCannotBeGuessed:
    """The finding: `?secret__startswith=whsec_X` answered "1 result" or "0 results", so the
    whole secret came out one character at a time."""

    def test_a_support_agent_gets_the_same_answer_for_a_right_and_a_wrong_guess(
        self, django_user_model, endpoint
    ):
        agent = staff_who_may_view(django_user_model, "view_webhookendpoint")
        endpoints = changelist(WebhookEndpoint)
        assert agent.get(endpoints).status_code == 200  # they may look at the list

        right = agent.get(endpoints, {"secret__startswith": SECRET[:8]})
        wrong = agent.get(endpoints, {"secret__startswith": "whsec_Z"})

        # Before the guard: [[b"1 result"], [b"0 results"]], the answer to the guess.
        said = [re.findall(rb"\d+ results?", answer.content) for answer in (right, wrong)]
        assert [right.status_code, wrong.status_code] == [302, 302], said
        assert_refused(right, WebhookEndpoint)
        assert_refused(wrong, WebhookEndpoint)
        assert right.content == wrong.content

    def test_an_api_keys_hash_cannot_be_guessed_either(self, django_user_model):
        ApiKey.objects.create(name="shop", prefix="sk_abc", secret_hash="ab" * 32)
        agent = staff_who_may_view(django_user_model, "view_apikey")

        for guess in ("a", "ab" * 16, "z"):
            response = agent.get(changelist(ApiKey), {"secret_hash__startswith": guess})
            assert_refused(response, ApiKey)

    def test_the_refusal_is_logged_with_the_lookup_never_the_guess(
        self, django_user_model, endpoint, caplog
    ):
        agent = staff_who_may_view(django_user_model, "view_webhookendpoint")

        with caplog.at_level(logging.WARNING, logger="ledger_app.admin.lookups"):
            agent.get(changelist(WebhookEndpoint), {"secret__startswith": "whsec_Kn"})

        logged = " ".join(record.getMessage() for record in caplog.records)
        assert "secret__startswith" in logged and "looker" in logged
        assert "whsec_Kn" not in logged


@pytest.mark.parametrize(("model", "path"), SECRET_LOOKUPS)
class TestEverySecretIsRefusedByEveryAdmin:
    """Every registered admin, every path to a secret it can reach (its own fields and
    through relations: endpoint__secret from deliveries, user__password, ...)."""

    def test_for_every_lookup_type(self, model, path, admin_user):
        model_admin = admin.site._registry[model]
        request = RequestFactory().get("/")
        request.user = admin_user

        allowed = [
            lookup(path, lookup_type)
            for lookup_type in LOOKUP_TYPES
            if model_admin.lookup_allowed(lookup(path, lookup_type), "x", request)
        ]

        assert allowed == []

    def test_the_list_answers_as_for_a_bad_filter(self, model, path, admin_client):
        for lookup_type, value in [("startswith", "pbkdf2"), ("regex", "^w"), ("", "x")]:
            response = admin_client.get(changelist(model), {lookup(path, lookup_type): value})
            assert_refused(response, model)


@pytest.mark.parametrize(("model", "name"), CONCRETE_FIELDS)
class TestEveryFieldOfEveryAdmin:
    def test_an_undeclared_or_malformed_lookup_answers_e1_never_a_500(
        self, model, name, admin_client
    ):
        for query in ({f"{name}__regex": "["}, {f"{name}__startswith": "a"}):
            assert_refused(admin_client.get(changelist(model), query), model)


class TestMalformedFiltersOnTheMoneyLists:
    """Finding 6: `?id__regex=[` was a 500 (from the database) on these lists."""

    @pytest.mark.parametrize("model", [Refund.charge.field.related_model, Refund, LedgerEntry])
    @pytest.mark.parametrize(
        "query",
        [
            {"id__regex": "["},
            {"amount__gt": "abc"},
            {"created_at__range": "x"},
            {"no_such_field": "1"},
            {"id__in": ""},
        ],
        ids=lambda query: next(iter(query)),
    )
    def test_answers_e1(self, admin_client, model, query):
        ChargeFactory(amount=1_000)

        assert_refused(admin_client.get(changelist(model), query), model)

    @pytest.mark.parametrize("model", [Refund.charge.field.related_model, Refund, LedgerEntry])
    def test_a_date_filter_given_no_date_answers_e1(self, admin_client, model):
        response = admin_client.get(changelist(model), {"created_at__gte": "not-a-date"})

        assert_refused(response, model)

    def test_a_value_the_database_refuses_answers_e1(self, admin_client, monkeypatch):
        """What a declared filter's value can still do (PostgreSQL's "invalid regular
        expression", a number out of range): a bad filter, not a 500."""

        def refused_by_the_database(paginator):
            raise DataError("invalid regular expression: brackets [] not balanced")

        monkeypatch.setattr(LargeTablePaginator, "count", property(refused_by_the_database))
        charges = Refund.charge.field.related_model

        response = admin_client.get(changelist(charges), {"status__exact": "succeeded"})

        assert_refused(response, charges)
        assert ChargeFactory(amount=1_000)  # the test's transaction is still usable


@pytest.mark.parametrize(
    "model", [pytest.param(model, id=model._meta.label) for model, _ in REGISTERED]
)
def test_every_filter_every_list_offers_still_works(model, admin_client):
    """Each choice of each filter in each list's sidebar, as a person clicks it."""
    charge = ChargeFactory(amount=2_000)
    create_refund(RefundRequest(charge_id=charge.pk, amount=500))
    url = changelist(model)
    page = admin_client.get(url)
    assert page.status_code == 200
    clicked = 0

    for spec in page.context["cl"].filter_specs:
        for choice in spec.choices(page.context["cl"]):
            response = admin_client.get(url + choice["query_string"])
            assert response.status_code == 200, (spec.title, choice["query_string"])
            clicked += 1

    assert clicked >= len(page.context["cl"].filter_specs)


@pytest.mark.parametrize(
    "model", [pytest.param(model, id=model._meta.label) for model, _ in REGISTERED]
)
def test_a_nul_anywhere_in_a_lists_query_string_is_a_400(model, admin_client):
    """PostgreSQL refuses a NUL in any text it is asked to compare: Django's user and group
    lists searched for one too, not only ours."""
    for query in ({"q": "\x00"}, {"q": "a\x00b", "o": "1"}, {"p": "\x00"}):
        assert admin_client.get(changelist(model), query).status_code == 400


class TestTheLinksOurPagesMake:
    def test_a_charges_refunds_and_ledger_entries(self, admin_client):
        charge, other = ChargeFactory(amount=2_000), ChargeFactory(amount=3_000)
        for each in (charge, other):
            create_refund(RefundRequest(charge_id=each.pk, amount=500))

        for model in (Refund, LedgerEntry):
            response = admin_client.get(changelist(model), {"charge__id__exact": charge.pk})
            assert response.status_code == 200
            listed = {row.charge_id for row in response.context["cl"].result_list}
            assert listed == {charge.pk}

    def test_the_dashboards_statuses(self, admin_client):
        response = admin_client.get(changelist(Refund), {"status__in": "succeeded,pending"})

        assert response.status_code == 200


class TestOrderingSearchAndExport:
    def guarded(self, **options) -> admin.ModelAdmin:
        admin_class = guard().guarded_admin_class(type("SomeAdmin", (admin.ModelAdmin,), options))
        return admin_class(WebhookEndpoint, AdminSite(name="elsewhere"))

    def ordering_of(self, model_admin, admin_user, query) -> list[str]:
        request = RequestFactory().get("/", query)
        request.user = admin_user
        return [
            str(order)
            for order in model_admin.get_changelist_instance(request).queryset.query.order_by
        ]

    def test_ordering_by_a_secret_column_is_dropped(self, admin_user, endpoint):
        model_admin = self.guarded(list_display=["id", "secret"], ordering=["secret", "id"])

        for query in ({}, {"o": "1"}, {"o": "-1"}, {"o": "1.0"}):
            ordering = self.ordering_of(model_admin, admin_user, query)
            assert ordering and not any("secret" in order for order in ordering), query

    def test_a_secret_search_field_is_dropped(self, admin_user, endpoint):
        model_admin = self.guarded(search_fields=["url", "secret", "^secret"])
        request = RequestFactory().get("/", {"q": SECRET})
        request.user = admin_user

        assert model_admin.get_search_fields(request) == ["url"]

    @pytest.mark.parametrize(
        ("model", "column"),
        [(WebhookEndpoint, "secret"), (ApiKey, "secret_hash"), (WebhookDelivery, "id")],
    )
    def test_a_secret_export_column_is_refused(self, model, column):
        if column == "id":
            assert export_plan(model, ["id"])  # what is no secret exports as before
            return
        with pytest.raises(ImproperlyConfigured, match="never exported"):
            export_plan(model, ["id", column])

    def test_no_exported_list_has_a_secret_column(self):
        exported = [a for _, a in REGISTERED if isinstance(a, CsvExport)]

        assert exported
        for model_admin in exported:
            export_plan(model_admin.model, model_admin.export_columns)

    def test_an_export_filtered_through_a_secret_is_refused(self, admin_client):
        charge = ChargeFactory(amount=2_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=500))

        response = admin_client.get(
            reverse("admin:ledger_app_refund_export"), {"created_by__password__startswith": "p"}
        )

        assert response.status_code == 400
        assert b"invalid_filter" in response.content


class TestEveryAdminIsGuarded:
    """One guard (ledger_app/admin/lookups.py) for every admin on the site, ours and Django's,
    django-axes' and django-otp's, and `manage.py check` says when an admin lacks it."""

    def test_every_registered_admin_has_the_guard_and_declares_no_secret(self):
        assert [
            type(a).__name__ for _, a in REGISTERED if not isinstance(a, guard().LookupGuard)
        ] == []
        assert guard().check_admin_lookups() == []

    def test_the_secrets_listed_here_are_the_guards_secrets(self):
        for label, names in SECRETS.items():
            for name in names:
                assert guard().is_secret(apps.get_model(label)._meta.get_field(name)), (label, name)

    def test_djangos_own_admins_and_those_registered_later_are_guarded(self):
        site = BackOfficeAdminSite(name="elsewhere")
        site.register(Group, GroupAdmin)

        site.guard_every_admin(guard().guarded_admin_class)
        site.register(Permission)

        assert isinstance(site._registry[Group], GroupAdmin)
        assert all(isinstance(a, guard().LookupGuard) for a in site._registry.values())

    def test_the_check_names_an_unguarded_admin_and_a_declared_secret(self):
        site = AdminSite(name="elsewhere")
        site.register(Group, GroupAdmin)  # registered before any guard
        leaky = type("LeakyAdmin", (admin.ModelAdmin,), {"search_fields": ["secret"]})
        site.register(WebhookEndpoint, guard().guarded_admin_class(leaky))

        found = {(message.id, message.obj.model) for message in guard().lookup_problems(site)}

        assert found == {("ledger_app.E101", Group), ("ledger_app.E102", WebhookEndpoint)}
