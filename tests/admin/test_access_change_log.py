"""Changes to who may move money, made in the admin (limits, a person's groups, statuses and
permissions, a group's permissions, an API key's limits), are in the admin log with before
and after and in a WARNING line naming who made them; no password or key hash ever is."""

from __future__ import annotations

import logging

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import ApiKey, RefundLimit
from tests.second_factor import verified
from tests.staff_forms import user_change_form

pytestmark = pytest.mark.django_db

ACCESS = "ledger_app.admin.access"


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "root-pw-123")


@pytest.fixture
def root(superuser):
    """The superuser with a fresh code: the writes below are allowed."""
    return verified(Client(), superuser)


@pytest.fixture
def access_log(caplog):
    caplog.set_level(logging.WARNING, logger=ACCESS)

    def lines() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == ACCESS and r.levelno == logging.WARNING
        ]

    return lines


def last_entry() -> LogEntry:
    entry = LogEntry.objects.order_by("-pk").first()
    assert entry is not None, "no admin log entry"
    return entry


class TestLimits:
    def test_a_limit_added_is_logged_with_what_it_allows(self, root, support_agent, access_log):
        root.post(
            reverse("admin:ledger_app_refundlimit_add"),
            {"user": support_agent.pk, "currency": "usd", "per_refund": "", "per_day": "20.00"},
        )

        entry = last_entry()
        assert entry.action_flag == ADDITION
        assert entry.change_message == (
            "Added with group none; user agent; api key none; currency USD; "
            "per refund no limit; per day $20.00."
        )
        assert access_log() == [
            f"access added by root: refund limit 'agent (USD)'. {entry.change_message[:-1]}"
        ]

    def test_a_limit_changed_is_logged_before_and_after(self, root, support_agent, access_log):
        limit = RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=10_000)

        root.post(
            reverse("admin:ledger_app_refundlimit_change", args=[limit.pk]),
            {"user": support_agent.pk, "currency": "usd", "per_refund": "", "per_day": ""},
        )

        entry = last_entry()
        assert entry.action_flag == CHANGE
        assert "Before → after: per refund $100.00 → no limit." in entry.change_message
        assert "per day" not in entry.change_message  # unchanged, so not said
        [line] = access_log()
        assert line.startswith("access changed by root: refund limit 'agent (USD)'.")
        assert "per refund $100.00 → no limit" in line

    def test_a_limit_deleted_is_logged_with_what_it_was(self, root, support_agent, access_log):
        limit = RefundLimit.objects.create(user=support_agent, currency="eur", per_day=5_000)
        by_action = RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=1)

        root.post(reverse("admin:ledger_app_refundlimit_delete", args=[limit.pk]), {"post": "yes"})
        root.post(
            reverse("admin:ledger_app_refundlimit_changelist"),
            {"action": "delete_selected", "_selected_action": [by_action.pk], "post": "yes"},
        )

        assert not RefundLimit.objects.exists()
        deleted = LogEntry.objects.filter(action_flag=DELETION).order_by("pk")
        assert [e.change_message for e in deleted] == [
            "Deleted. Before: group none; user agent; api key none; currency EUR; "
            "per refund no limit; per day €50.00.",
            "Deleted. Before: group none; user agent; api key none; currency USD; "
            "per refund $0.01; per day no limit.",
        ]
        assert len(access_log()) == 2 and all("deleted by root" in x for x in access_log())

    def test_an_api_keys_limit_names_the_key_never_its_hash(self, root, access_log):
        key, secret = create_api_key(name="order-service")

        root.post(
            reverse("admin:ledger_app_refundlimit_add"),
            {"api_key": key.pk, "currency": "usd", "per_refund": "50.00", "per_day": ""},
        )

        entry = last_entry()
        assert f"api key order-service ({key.prefix}...)" in entry.change_message
        assert "per refund $50.00" in entry.change_message
        hashed = ApiKey.objects.get(pk=key.pk).secret_hash
        for text in [entry.change_message, *access_log()]:
            assert hashed not in text and secret not in text


class TestPeople:
    def test_making_an_agent_a_lead_is_logged(self, root, support_agent, access_log):
        agents, leads = (
            Group.objects.get(name="Support agents"),
            Group.objects.get(name="Support leads"),
        )

        root.post(
            reverse("admin:auth_user_change", args=[support_agent.pk]),
            user_change_form(support_agent, groups=[agents, leads]),
        )

        entry = last_entry()
        assert "groups [Support agents] → [Support agents, Support leads]" in entry.change_message
        [line] = access_log()
        assert line.startswith("access changed by root: user 'agent'.")
        assert "groups [Support agents] → [Support agents, Support leads]" in line

    def test_statuses_and_permissions_are_logged_and_no_password_hash(
        self, root, support_agent, access_log
    ):
        resend = Permission.objects.get(codename="resend_webhookdelivery")

        root.post(
            reverse("admin:auth_user_change", args=[support_agent.pk]),
            user_change_form(
                support_agent, groups=support_agent.groups.all(), perms=[resend], superuser=True
            ),
        )

        message = last_entry().change_message
        assert "superuser status False → True" in message
        assert "user permissions [] → [ledger_app.resend_webhookdelivery]" in message
        support_agent.refresh_from_db()
        assert support_agent.is_superuser
        password_hash = support_agent.password
        for text in [message, *access_log()]:
            assert password_hash not in text and "pbkdf2" not in text and "md5$" not in text

    def test_a_change_to_nothing_about_access_is_djangos_plain_entry(
        self, root, support_agent, access_log
    ):
        form = user_change_form(support_agent, groups=support_agent.groups.all())

        root.post(
            reverse("admin:auth_user_change", args=[support_agent.pk]),
            {**form, "email": "agent@example.com"},
        )

        message = last_entry().get_change_message()
        assert message.startswith("Changed Email address") and "→" not in message
        assert access_log() == []


class TestGroups:
    def test_a_groups_permissions_are_logged_before_and_after(self, root, access_log):
        agents = Group.objects.get(name="Support agents")
        approve = Permission.objects.get(codename="approve_refund")

        root.post(
            reverse("admin:auth_group_change", args=[agents.pk]),
            {
                "name": agents.name,
                "permissions": [*agents.permissions.values_list("pk", flat=True), approve.pk],
            },
        )

        message = last_entry().change_message
        assert "Before → after: permissions [" in message
        before, after = message.split("Before → after: permissions ")[1].split(" → ")
        assert "ledger_app.approve_refund" not in before
        assert "ledger_app.approve_refund" in after and "ledger_app.refund_charge" in after
        [line] = access_log()
        assert line.startswith("access changed by root: group 'Support agents'.")
