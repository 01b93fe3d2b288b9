"""Every admin write needs a fresh second factor, by construction. Walked over every URL
under the admin's prefix (each model admin's own and custom pages, the site's, the
project's) and every action of every admin: a superuser who signed in with a password alone
is sent to the code page and nothing in the database changes. Only signing in and out, the
code page and one's own time zone are open to them. With a code, the same writes work."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import URLResolver, get_resolver, resolve, reverse
from django.utils import timezone

from ledger_app.access.api_keys import create_api_key
from ledger_app.admin.write_gate import EXEMPT
from ledger_app.books.services import close_day, record_payout
from ledger_app.charges.services import create_charge
from ledger_app.events import services as events
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import (
    ApiKey,
    BalanceTransaction,
    BooksDifference,
    Charge,
    EventType,
    Payout,
    Refund,
    RefundLimit,
    WebhookDelivery,
)
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.second_factor import device_of, verified
from tests.staff_forms import user_change_form

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

VERIFY = reverse("verify-second-factor")
PASSWORD = "root-pass-123"
# What a post carries: enough for any of the admin's forms and actions to act on, were it
# let through (the positive controls below show such posts do act, with a code).
FORM = {
    "post": "yes",
    "index": "0",
    "currency": "USD",
    "per_refund": "",
    "per_day": "",
    "name": "Renamed",
    "username": "someone-new",
    "password1": "a-long-new-password-1",
    "password2": "a-long-new-password-1",
    "usable_password": "true",
    "old_password": PASSWORD,
    "new_password1": "a-long-new-password-1",
    "new_password2": "a-long-new-password-1",
    "is_active": "on",
    "is_staff": "on",
    "is_superuser": "on",
    "note": "done",
    "reason": "duplicate",
    "amount": "1.00",
    "time_zone": "Europe/Paris",
}


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)


@pytest.fixture
def password_only(client, superuser):
    """The superuser signed in with their password; no code entered in this session."""
    device_of(superuser)
    client.force_login(superuser)
    return client


@pytest.fixture
def rows(superuser, support_agent, settings):
    """At least one row behind every admin, so that every object URL names a real one: a
    refund waiting for the provider (the attention queue), one it settled, one awaiting
    approval, limits,
    an API key, a webhook endpoint with deliveries, a day of the books, a failed sign-in."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True  # an endpoint nothing is sent to here
    create_endpoint(url="http://127.0.0.1:9/hook", enabled_events=["*"])
    create_api_key(name="order-service")
    unknown = ChargeFactory(amount=5_000, metadata={"simulate_refund": "timeout"})
    create_refund(RefundRequest(charge_id=unknown.pk, amount=100, idempotency_key="k-walk"))
    captured = create_charge(amount=1_000, currency="usd").item  # the provider's records
    create_refund(RefundRequest(charge_id=captured.pk, amount=100))
    RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=10_000)
    create_refund(
        RefundRequest(charge_id=ChargeFactory(amount=50_000).pk, amount=20_000, actor=support_agent)
    )
    with transaction.atomic():
        events.record(EventType.CHARGE_SUCCEEDED, unknown)
    books_rows()
    Client().post(reverse("admin:login"), {"username": "root", "password": "wrong"})
    assert Refund.objects.filter(status=Refund.Status.AWAITING_APPROVAL).exists()
    assert Refund.objects.filter(status=Refund.Status.UNKNOWN).exists()
    assert WebhookDelivery.objects.exists()


def books_rows() -> None:
    """The books against the provider: a balance transaction in a payout, and today closed,
    with its differences (the refunds above, and that transaction, are each on one side
    only)."""
    now = timezone.now()
    paid = BalanceTransaction(
        id="txn_walk",
        type="adjustment",
        amount=-100,
        net=-100,
        currency="usd",
        created=now,
        available_on=now,
    )
    record_payout(
        Payout(id="po_walk", amount=-100, currency="usd", arrival_date=now, created=now), [paid]
    )
    close_day(now.date(), now.date())
    assert BooksDifference.objects.exists()


def everything() -> dict[str, list[str]]:
    """Every row of every table, LogEntry included (sessions aside: a session is what the
    code page answers with)."""
    return {
        model._meta.label: sorted(map(repr, model._default_manager.values_list()))
        for model in apps.get_models()
        if not model._meta.proxy and model is not Session
    }


def sent_to_code_page(response, back_to: str) -> bool:
    if response.status_code != 302 or not response.url.startswith(f"{VERIFY}?"):
        return False
    return parse_qs(urlsplit(response.url).query)["next"][0] == back_to


def walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern)


def admin_routes() -> list[str]:
    """Every route of the project's URLconf under the admin's prefix: the site's own pages,
    each model admin's (custom get_urls() pages included) and the project's (code page,
    time zone, the NUL refusal)."""
    prefix = reverse("admin:index").lstrip("/")
    routes = walk(get_resolver().url_patterns)
    return [route for route in routes if route.startswith((prefix, f"^{prefix}"))]


def staff_request(user):
    request = RequestFactory().get(reverse("admin:index"))
    request.user = user
    return request


# (app_label, model_name): Options.model_name is typed optional; a model's is never None.
ModelKey = tuple[str, str | None]


def object_ids(user) -> dict[ModelKey, str]:
    """(app_label, model_name) of each registered admin: the id of a row it shows."""
    request = staff_request(user)
    ids: dict[ModelKey, str] = {}
    for model, model_admin in admin.site._registry.items():
        row = model_admin.get_queryset(request).first()
        assert row is not None, f"no {model._meta.label} row for its admin's object pages"
        ids[(model._meta.app_label, model._meta.model_name)] = quote(str(row.pk))
    return ids


def concrete(route: str, ids: dict[ModelKey, str]) -> str:
    """A route with real ids, app labels and paths filled in."""
    path = "/" + route
    if "(?P<app_label>" in route:  # the site's app index
        return reverse("admin:app_list", args=["ledger_app"])
    if "(?P<url>" in route:  # the site's catch-all
        return reverse("admin:index") + "no-such-page/"
    if "\\x00" in route or "\x00" in route:  # the project's NUL refusal
        return reverse("admin:index") + "ledger_app/charge/%00/change/"
    if "content_type_id>" in route:  # view on site
        charge = Charge.objects.first()
        assert charge is not None
        content_type = ContentType.objects.get_for_model(Charge)
        return reverse("admin:view_on_site", args=[content_type.pk, quote(charge.pk)])
    if "<" in route:
        _, app_label, model_name, *_ = route.split("/")  # admin/<app_label>/<model_name>/...
        object_id = ids[(app_label, model_name)]
        path = re.sub(r"<(?:\w+:)?(?:object_id|id)>", lambda _: object_id, path)
    assert not re.search(r"[<(^$]", path), f"a route this walk cannot fill in: {route!r}"
    return path


def admin_urls(user) -> list[str]:
    ids = object_ids(user)
    return sorted({concrete(route, ids) for route in admin_routes()})


class TestWalkingEveryAdminUrl:
    def test_a_post_without_a_code_changes_nothing_anywhere(self, password_only, superuser, rows):
        urls = [url for url in admin_urls(superuser) if resolve(url).view_name not in EXEMPT]
        before = everything()

        for url in urls:
            response = password_only.post(url, FORM)

            assert sent_to_code_page(response, url), (url, response.status_code)
            assert everything() == before, url

        walked = {resolve(url).view_name for url in urls}
        registry = {(m._meta.app_label, m._meta.model_name) for m in admin.site._registry}
        for app_label, model_name in registry:
            for page in ("add", "change", "delete", "history", "changelist"):
                assert f"admin:{app_label}_{model_name}_{page}" in walked
        assert {
            "admin:ledger_app_charge_refund",
            "admin:auth_user_password_change",
            "admin:password_change",
            "admin:autocomplete",
        } <= walked

    def test_only_signing_in_and_out_the_code_page_and_ones_time_zone_are_exempt(
        self, superuser, rows
    ):
        exempt = {
            resolve(url).view_name
            for url in admin_urls(superuser)
            if resolve(url).view_name in EXEMPT
        }

        assert (
            exempt
            == EXEMPT
            == {
                "admin:login",
                "admin:logout",
                "verify-second-factor",
                "admin-time-zone",
            }
        )

    def test_the_exempt_pages_answer_without_a_code(self, password_only, superuser):
        zone = password_only.post(reverse("admin-time-zone"), {"time_zone": "Europe/Paris"})
        code = password_only.post(VERIFY, {"code": "000000", "next": "/admin/"})
        signed_out = password_only.post(reverse("admin:logout"))
        signed_in = Client().post(
            reverse("admin:login"), {"username": "root", "password": PASSWORD}
        )

        assert zone.status_code == 302 and superuser.staff_preference.time_zone == "Europe/Paris"
        assert code.status_code == 200 and b"That code is not right" in code.content
        assert signed_out.status_code == 200 and "_auth_user_id" not in password_only.session
        assert signed_in.status_code == 302

    @pytest.mark.parametrize("method", ["put", "patch", "delete"])
    def test_every_method_that_may_change_data_is_a_write(
        self, password_only, support_agent, method
    ):
        url = reverse("admin:auth_user_change", args=[support_agent.pk])
        before = everything()

        response = getattr(password_only, method)(url)

        assert sent_to_code_page(response, url)
        assert everything() == before

    def test_someone_not_signed_in_is_sent_to_sign_in(self, client, support_agent):
        url = reverse("admin:auth_user_change", args=[support_agent.pk])
        before = everything()

        response = client.post(url, FORM)

        assert response.status_code == 302
        assert response.url.startswith(reverse("admin:login"))
        assert everything() == before


class TestWalkingEveryAction:
    def test_no_action_of_any_admin_runs_without_a_code(self, password_only, superuser, rows):
        request = staff_request(superuser)
        ids = object_ids(superuser)
        before = everything()
        walked = set()

        for model, model_admin in admin.site._registry.items():
            changelist = reverse(
                f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"
            )
            selected = ids[(model._meta.app_label, model._meta.model_name)]
            for name in model_admin.get_actions(request):
                response = password_only.post(
                    changelist, {**FORM, "action": name, "_selected_action": [selected]}
                )

                assert sent_to_code_page(response, changelist), (changelist, name)
                assert everything() == before, (changelist, name)
                walked.add(name)

        assert {
            "delete_selected",
            "refund_in_full",
            "reconcile_now",
            "retry_dispatch",
            "mark_handled",
            "approve_refunds",
            "reject_refunds",
            "resend",
            "explain_differences",
        } <= walked


class TestTheFinding:
    """A superuser signed in with a password alone added a limit with blank amounts for an
    agent, whose next $200 refund then went straight to succeeded instead of waiting."""

    def test_a_password_alone_cannot_lift_an_agents_limit(self, password_only, support_agent):
        agents = Group.objects.get(name="Support agents")
        RefundLimit.objects.create(group=agents, currency="usd", per_refund=10_000)  # $100
        add = reverse("admin:ledger_app_refundlimit_add")

        lifted = password_only.post(
            add, {"user": support_agent.pk, "currency": "USD", "per_refund": "", "per_day": ""}
        )
        agent = verified(Client(), support_agent)
        refund = refund_through_the_form(agent, ChargeFactory(amount=50_000), "200.00")

        assert sent_to_code_page(lifted, add)
        assert not RefundLimit.objects.filter(user=support_agent).exists()
        assert refund.status == Refund.Status.AWAITING_APPROVAL

    def test_with_a_code_the_same_limit_is_added(self, client, superuser, support_agent):
        verified(client, superuser)

        response = client.post(
            reverse("admin:ledger_app_refundlimit_add"),
            {"user": support_agent.pk, "currency": "USD", "per_refund": "", "per_day": ""},
        )

        assert response.status_code == 302
        limit = RefundLimit.objects.get(user=support_agent)
        assert (limit.per_refund, limit.per_day) == (None, None)


def refund_through_the_form(client, charge, amount: str) -> Refund:
    """What the agent does: open the charge's refund form, type the amount, submit."""
    url = reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])
    page = client.get(url, follow=True).content
    key_found = re.search(rb'name="idempotency_key" value="([^"]+)"', page)
    state_found = re.search(rb'name="charge_state" value="([^"]+)"', page)
    assert key_found and state_found, page
    key, state = key_found.group(1).decode(), state_found.group(1).decode()
    done = client.post(
        url,
        {"amount": amount, "reason": "duplicate", "idempotency_key": key, "charge_state": state},
    )
    assert done.status_code == 302, done.content[:500]
    return Refund.objects.get(charge=charge)


class TestWithACode:
    """The positive controls: the writes the walk refused go through after a code."""

    @pytest.fixture
    def root(self, client, superuser):
        return verified(client, superuser)

    def test_a_groups_permissions_change(self, root):
        agents = Group.objects.get(name="Support agents")
        approve = Permission.objects.get(codename="approve_refund")
        wanted = [*agents.permissions.values_list("pk", flat=True), approve.pk]

        response = root.post(
            reverse("admin:auth_group_change", args=[agents.pk]),
            {"name": agents.name, "permissions": wanted},
        )

        assert response.status_code == 302
        assert agents.permissions.filter(pk=approve.pk).exists()

    def test_an_agent_is_made_a_lead_and_given_a_permission(self, root, support_agent):
        leads = Group.objects.get(name="Support leads")
        resend = Permission.objects.get(codename="resend_webhookdelivery")

        response = root.post(
            reverse("admin:auth_user_change", args=[support_agent.pk]),
            user_change_form(
                support_agent, groups=[*support_agent.groups.all(), leads], perms=[resend]
            ),
        )

        assert response.status_code == 302, response.context["adminform"].form.errors
        assert support_agent.groups.filter(pk=leads.pk).exists()
        assert support_agent.user_permissions.filter(pk=resend.pk).exists()

    def test_an_api_keys_limit_is_set(self, root):
        key, _ = create_api_key(name="order-service")

        response = root.post(
            reverse("admin:ledger_app_refundlimit_add"),
            {"api_key": key.pk, "currency": "USD", "per_refund": "50.00", "per_day": ""},
        )

        assert response.status_code == 302
        assert RefundLimit.objects.get(api_key=key).per_refund == 5_000
        assert ApiKey.objects.get(pk=key.pk).revoked_at is None

    def test_a_webhook_delivery_is_resent(self, root, rows):
        delivery = WebhookDelivery.objects.first()
        assert delivery is not None
        WebhookDelivery.objects.filter(pk=delivery.pk).update(status="delivered")

        root.post(
            reverse("admin:ledger_app_webhookdelivery_changelist"),
            {"action": "resend", "_selected_action": [delivery.pk]},
        )

        delivery.refresh_from_db()
        assert delivery.status == "pending"

    def test_a_limit_is_deleted(self, root, support_agent):
        limit = RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=100)

        response = root.post(
            reverse("admin:ledger_app_refundlimit_delete", args=[limit.pk]), {"post": "yes"}
        )

        assert response.status_code == 302
        assert not RefundLimit.objects.filter(pk=limit.pk).exists()
