"""Refund limits fail closed: a requester limited in some currencies who refunds in another
waits for approval (REFUND_LIMIT_OTHER_CURRENCIES=approve, the default), whoever they are
and however they ask: the admin's refund form, the API, bulk_refund --requested-by, the
service itself. A requester with no limits at all is not limited, as before."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from ledger_app.access.api_keys import PREFIX_LENGTH, create_api_key
from ledger_app.approvals.limits import EVERY_REFUND_WAITS, NO_LIMITS, limits_in_currency
from ledger_app.approvals.services import approve_refund
from ledger_app.models import ApiKey, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import AGENTS_MIGRATION, LEADS_MIGRATION, ChargeFactory, migration_group
from tests.second_factor import verified

ROOT = Path(__file__).resolve().parents[2]
FORM = "application/x-www-form-urlencoded"
USD_LIMITS = {"currency": "usd", "per_refund": 10_000, "per_day": 30_000}

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants", "inline_dispatch"),
]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def agents():
    return migration_group(AGENTS_MIGRATION)


@pytest.fixture
def agent(django_user_model, agents):
    """A support agent whose group may refund $100.00 at a time, $300.00 a day, in USD
    only (the demo's limits)."""
    RefundLimit.objects.create(group=agents, **USD_LIMITS)
    user = django_user_model.objects.create_user("agent", is_staff=True)
    user.groups.add(agents)
    return user


@pytest.fixture
def eur_charge():
    return ChargeFactory(amount=10_000, currency="eur")


def assert_waits_unsent(refund: Refund, charge) -> None:
    refund.refresh_from_db()
    charge.refresh_from_db()
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    assert charge.amount_refunded == refund.amount  # reserved while it waits
    assert not ProviderRequest.objects.filter(idempotency_key=refund.provider_idempotency_key)


class TestAnotherCurrencyWaits:
    def test_an_agent_limited_in_usd_refunding_32_euros_waits_for_approval(self, agent, eur_charge):
        """Finding 7: it went straight through, because there is no EUR row."""
        refund = create_refund(
            RefundRequest(charge_id=eur_charge.id, amount=3_200, actor=agent)
        ).item

        assert_waits_unsent(refund, eur_charge)

    def test_a_users_own_limit_in_usd_makes_their_eur_refunds_wait(
        self, django_user_model, eur_charge
    ):
        user = django_user_model.objects.create_user("solo", is_staff=True)
        RefundLimit.objects.create(user=user, **USD_LIMITS)

        refund = create_refund(RefundRequest(charge_id=eur_charge.id, amount=1, actor=user)).item

        assert_waits_unsent(refund, eur_charge)

    def test_a_limit_in_the_refunds_own_currency_still_decides(self, agent, agents):
        RefundLimit.objects.create(group=agents, currency="eur", per_refund=5_000)
        charge = ChargeFactory(amount=20_000, currency="eur")

        within = create_refund(RefundRequest(charge_id=charge.id, amount=5_000, actor=agent)).item
        over = create_refund(RefundRequest(charge_id=charge.id, amount=5_001, actor=agent)).item

        assert within.status == Refund.Status.SUCCEEDED
        assert over.status == Refund.Status.AWAITING_APPROVAL

    def test_the_usd_limits_are_unchanged(self, agent):
        charge = ChargeFactory(amount=50_000, currency="usd")

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=10_000, actor=agent)).item

        assert refund.status == Refund.Status.SUCCEEDED

    def test_a_lead_approves_it_and_it_is_sent_once(self, agent, eur_charge, django_user_model):
        lead = django_user_model.objects.create_user("lead", is_staff=True)
        lead.groups.add(migration_group(LEADS_MIGRATION))
        refund = create_refund(
            RefundRequest(charge_id=eur_charge.id, amount=3_200, actor=agent)
        ).item

        approve_refund(refund_id=refund.id, approver=lead, note="checked")

        refund.refresh_from_db()
        assert refund.status == Refund.Status.SUCCEEDED
        assert ProviderRequest.objects.filter(operation="refund").count() == 1

    def test_allow_lets_it_through_as_before(self, agent, eur_charge, settings):
        settings.REFUND_LIMIT_OTHER_CURRENCIES = "allow"

        refund = create_refund(
            RefundRequest(charge_id=eur_charge.id, amount=3_200, actor=agent)
        ).item

        assert refund.status == Refund.Status.SUCCEEDED


class TestRequestersWithoutLimits:
    def test_a_person_with_no_limit_rows_is_not_limited(
        self, django_user_model, agents, eur_charge
    ):
        user = django_user_model.objects.create_user("unlimited", is_staff=True)
        user.groups.add(agents)  # the group has no rows in this test

        refund = create_refund(
            RefundRequest(charge_id=eur_charge.id, amount=10_000, actor=user)
        ).item

        assert refund.status == Refund.Status.SUCCEEDED
        assert (
            limits_in_currency(user=user, actor_label="user:unlimited", currency="eur") == NO_LIMITS
        )

    def test_an_operators_command_is_not_limited(self, agent, eur_charge):
        refund = create_refund(
            RefundRequest(charge_id=eur_charge.id, amount=3_200, actor="cli:ops")
        ).item

        assert refund.status == Refund.Status.SUCCEEDED


class TestEveryKindOfRequester:
    """Each interface that takes a refund on someone's authority, in EUR, by a requester
    limited in USD only."""

    def test_the_admin_refund_form_says_so_and_the_refund_waits(self, agent, eur_charge):
        client = verified(Client(), agent)
        url = reverse("admin:ledger_app_charge_refund", args=[quote(eur_charge.pk)])
        page = client.get(url, follow=True)
        text = " ".join(re.sub(r"<[^>]+>", " ", page.content.decode()).split())
        found = {
            name: re.search(rf'name="{name}" value="([^"]*)"', page.content.decode())
            for name in ("idempotency_key", "charge_state")
        }
        assert all(found.values()), text
        hidden = {name: match[1] for name, match in found.items() if match}

        done = client.post(
            page.wsgi_request.path,
            {"amount": "32.00", "reason": "requested_by_customer", **hidden},
        )

        assert "Your limits in EUR: €0.00 per refund" in text
        assert done.status_code == 302
        assert_waits_unsent(Refund.objects.get(charge=eur_charge), eur_charge)
        assert limits_in_currency(user=agent, actor_label="user:agent", currency="eur") == (
            EVERY_REFUND_WAITS
        )

    def test_an_api_key_limited_in_usd_waits_in_eur(self, client, eur_charge):
        secret = create_api_key(name="client")[1]
        key = ApiKey.objects.get(prefix=secret[:PREFIX_LENGTH])
        RefundLimit.objects.create(api_key=key, **USD_LIMITS)

        response = client.post(
            "/v1/refunds",
            f"charge={eur_charge.id}&amount=3200",
            content_type=FORM,
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        )

        assert response.status_code == 200, response.content
        assert response.json()["ledger_status"] == "awaiting_approval"
        assert_waits_unsent(Refund.objects.get(pk=response.json()["id"]), eur_charge)

    def test_bulk_refund_requested_by_them_waits_and_its_dry_run_says_so(
        self, agent, eur_charge, tmp_path
    ):
        file = tmp_path / "in.csv"
        with file.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(
                [("charge", "amount", "reason", "note"), (eur_charge.id, "3200", "duplicate", "")]
            )
        dry, real = io.StringIO(), io.StringIO()
        common = [str(file), "--batch-id", "eur1", "--requested-by", "agent"]

        call_command("bulk_refund", *common, "--dry-run", stdout=dry, stderr=io.StringIO())
        call_command("bulk_refund", *common, stdout=real, stderr=io.StringIO())

        assert "1 would_await_approval" in dry.getvalue()
        assert "1 awaiting_approval" in real.getvalue()
        assert_waits_unsent(Refund.objects.get(charge=eur_charge), eur_charge)


class TestTheSetting:
    @pytest.mark.parametrize("value", ["sometimes", "", "APPROVE"])
    def test_an_invalid_value_refuses_to_start(self, value):
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/root"),
            "DJANGO_SECRET_KEY": "test-key-for-the-limits-setting-0123456789abcdef",
            "REFUND_LIMIT_OTHER_CURRENCIES": value,
        }

        result = subprocess.run(
            [str(Path(sys.executable).parent / "python"), "manage.py", "check"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

        assert result.returncode != 0
        assert "REFUND_LIMIT_OTHER_CURRENCIES must be approve or allow" in result.stderr
