"""Times in the admin: in the reader's zone (their own, else ADMIN_TIME_ZONE), labelled with
it, in one format on lists, object pages and the charge page's history; the API and the
commands keep UTC."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.utils import quote
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from ledger_app.access.api_keys import create_api_key
from ledger_app.access.time_zones import AdminTimeZoneMiddleware, shown_time
from ledger_app.models import Refund, RefundLimit, StaffPreference
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.processes import manage_alone

pytestmark = pytest.mark.django_db

# A moment in UTC, and how the admin writes it in three zones (New York is on EST then).
KNOWN = datetime(2026, 11, 30, 19, 23, 45, tzinfo=UTC)
IN_UTC = "2026-11-30 19:23 UTC"
IN_NEW_YORK = "2026-11-30 14:23 EST"
IN_TOKYO = "2026-12-01 04:23 JST"
TIME_ZONE_PAGE = reverse("admin-time-zone")


def text_of(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def cells(response, css_class: str) -> list[str]:
    """The text of each <td class="css_class"> (or with it among its classes) on the page."""
    pattern = rf'<td class="[^"]*\b{css_class}\b[^"]*">(.*?)</td>'
    found = re.findall(pattern, response.content.decode(), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", cell).split()) for cell in found]


@pytest.fixture
def refund_at_a_known_moment() -> Refund:
    """A refund made through the service; only its age is made up (as seed_demo does)."""
    charge = ChargeFactory(amount=5_000)
    refund = create_refund(
        RefundRequest(charge_id=charge.pk, amount=1_250, note="Known moment")
    ).item
    Refund.objects.filter(pk=refund.pk).update(created_at=KNOWN)
    refund.refresh_from_db()
    return refund


def pages_of(client, refund: Refund) -> dict[str, HttpResponse]:
    return {
        "refund list": client.get(reverse("admin:ledger_app_refund_changelist")),
        "refund page": client.get(
            reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])
        ),
        "charge page": client.get(
            reverse("admin:ledger_app_charge_change", args=[quote(refund.charge_id)])
        ),
    }


def choose_zone(client, name: str, **extra):
    return client.post(TIME_ZONE_PAGE, {"time_zone": name, **extra})


class TestShownInTheReadersZone:
    def test_in_the_default_zone_then_in_the_zone_the_agent_sets(
        self, agent_client, support_agent, refund_at_a_known_moment
    ):
        refund = refund_at_a_known_moment
        before = pages_of(agent_client, refund)

        chosen = choose_zone(agent_client, "America/New_York")
        after = pages_of(agent_client, refund)

        for name, page in before.items():
            assert page.status_code == 200, name
            assert IN_UTC in text_of(page), name
            assert IN_NEW_YORK not in text_of(page), name
        assert chosen.status_code == 302
        assert StaffPreference.objects.get(user=support_agent).time_zone == "America/New_York"
        for name, page in after.items():
            assert IN_NEW_YORK in text_of(page), name
            assert IN_UTC not in text_of(page), name
        assert IN_UTC in cells(before["charge page"], "when")
        assert IN_NEW_YORK in cells(after["charge page"], "when")  # the refund history
        assert "Time zone: America/New_York" in text_of(after["refund list"])

    def test_the_default_comes_from_admin_time_zone(
        self, settings, agent_client, refund_at_a_known_moment
    ):
        settings.ADMIN_TIME_ZONE = "Asia/Tokyo"

        pages = pages_of(agent_client, refund_at_a_known_moment)

        for name, page in pages.items():
            assert IN_TOKYO in text_of(page), name
            assert IN_UTC not in text_of(page), name

    def test_the_ledger_entries_on_the_charge_page_follow_too(
        self, agent_client, refund_at_a_known_moment
    ):
        charge = refund_at_a_known_moment.charge
        entry = charge.ledger_entries.latest("id")  # written just now, not at KNOWN
        choose_zone(agent_client, "Asia/Tokyo")

        page = agent_client.get(reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)]))

        shown = cells(page, "when")
        in_tokyo = timezone.localtime(entry.created_at, ZoneInfo("Asia/Tokyo"))
        assert IN_TOKYO in shown  # the refund
        assert f"{in_tokyo:%Y-%m-%d %H:%M} JST" in shown  # its ledger entry, same zone and format

    def test_the_approval_queue_shows_expiry_in_the_readers_zone(self, admin_client, support_agent):
        RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=100)
        charge = ChargeFactory(amount=5_000)
        refund = create_refund(
            RefundRequest(charge_id=charge.pk, amount=1_250, actor=support_agent)
        ).item
        assert refund.status == Refund.Status.AWAITING_APPROVAL
        # Only when it expires is made up.
        Refund.objects.filter(pk=refund.pk).update(approval_expires_at=KNOWN + timedelta(days=1))
        choose_zone(admin_client, "America/New_York")

        page = admin_client.get(reverse("admin:ledger_app_refundapproval_changelist"))

        assert "2026-12-01 14:23 EST" in text_of(page)
        assert "(UTC)" not in text_of(page)

    def test_shown_time_is_the_formats_datetime_in_the_active_zone(self):
        with timezone.override("America/New_York"):
            assert shown_time(KNOWN) == IN_NEW_YORK
        with timezone.override("Europe/Paris"):
            assert shown_time(KNOWN) == "2026-11-30 20:23 CET"
        assert shown_time(KNOWN) == IN_UTC  # outside the admin: UTC, as the commands write
        assert shown_time(None) == "—"


class TestTheTimeZonePage:
    def test_offers_every_zone_sorted_and_the_default(self, agent_client):
        page = agent_client.get(TIME_ZONE_PAGE)

        options = re.findall(r'<option value="([^"]*)"', page.content.decode())
        assert page.status_code == 200
        assert options[0] == ""  # the back office's default
        assert options[1:] == sorted(options[1:])
        assert {"UTC", "America/New_York", "Asia/Kolkata"} <= set(options)
        assert "localtime" not in options and "Factory" not in options

    @pytest.mark.parametrize(
        "bad", ["Mars/Olympus_Mons", "localtime", "../../etc/passwd", "utc ", "x" * 5000, "\x00"]
    )
    def test_an_unknown_zone_is_refused_with_a_clear_message_and_changes_nothing(
        self, agent_client, support_agent, bad
    ):
        choose_zone(agent_client, "Europe/Paris")

        refused = choose_zone(agent_client, bad)

        assert refused.status_code == 200
        assert "not a time zone this back office knows" in text_of(refused)
        assert "(unknown_time_zone)" in text_of(refused)
        assert StaffPreference.objects.get(user=support_agent).time_zone == "Europe/Paris"

    def test_the_default_choice_goes_back_to_admin_time_zone(
        self, settings, agent_client, support_agent, refund_at_a_known_moment
    ):
        settings.ADMIN_TIME_ZONE = "Asia/Tokyo"
        choose_zone(agent_client, "America/New_York")

        choose_zone(agent_client, "")
        page = pages_of(agent_client, refund_at_a_known_moment)["refund page"]

        assert StaffPreference.objects.get(user=support_agent).time_zone == ""
        assert IN_TOKYO in text_of(page)

    def test_saving_goes_back_to_the_page_the_agent_came_from_on_this_site_only(self, agent_client):
        charges = reverse("admin:ledger_app_charge_changelist")

        back = choose_zone(agent_client, "Asia/Tokyo", next=charges)
        elsewhere = choose_zone(agent_client, "Asia/Tokyo", next="https://evil.example/")

        assert back.url == charges
        assert elsewhere.url == reverse("admin:index")
        told = [str(m) for m in back.wsgi_request._messages]
        assert any(m.startswith("Times are now shown in Asia/Tokyo: it is ") for m in told)

    def test_every_admin_page_links_to_it_with_the_zone_in_use(self, agent_client):
        choose_zone(agent_client, "Asia/Kolkata")

        page = agent_client.get(reverse("admin:ledger_app_charge_changelist"))

        assert "Time zone: Asia/Kolkata" in text_of(page)
        assert f'href="{TIME_ZONE_PAGE}?next=' in page.content.decode()

    def test_only_staff_reach_it(self, client, django_user_model):
        customer = django_user_model.objects.create_user("customer", password="x" * 12)
        client.force_login(customer)

        response = choose_zone(client, "Asia/Tokyo")

        assert response.status_code == 302
        assert response.url.startswith(reverse("admin:login"))
        assert not StaffPreference.objects.exists()


class TestOnlyTheAdmin:
    def test_the_middleware_activates_the_zone_for_admin_requests_only(self, support_agent):
        StaffPreference.objects.create(user=support_agent, time_zone="America/New_York")
        seen = []

        def view(request):
            seen.append(timezone.get_current_timezone_name())
            return HttpResponse()

        middleware = AdminTimeZoneMiddleware(view)
        for path in ["/admin/ledger_app/refund/", "/v1/refunds", "/webhooks/stripe"]:
            request = RequestFactory().get(path)
            request.user = support_agent
            middleware(request)
            seen.append(timezone.get_current_timezone_name())  # after the response

        assert seen == ["America/New_York", "UTC", "UTC", "UTC", "UTC", "UTC"]

    def test_a_stored_zone_the_tz_database_no_longer_knows_falls_back_to_the_default(
        self, agent_client, support_agent, refund_at_a_known_moment
    ):
        StaffPreference.objects.create(user=support_agent, time_zone="Atlantis/Capital")

        page = pages_of(agent_client, refund_at_a_known_moment)["refund page"]

        assert page.status_code == 200
        assert IN_UTC in text_of(page)

    def test_the_apis_created_is_the_same_unix_time_whatever_the_agents_zone(
        self, client, support_agent, refund_at_a_known_moment
    ):
        StaffPreference.objects.create(user=support_agent, time_zone="Asia/Tokyo")
        client.force_login(support_agent)  # a staff session in the same browser changes nothing
        secret = create_api_key(name="time zones")[1]

        body = client.get(
            f"/v1/refunds/{refund_at_a_known_moment.pk}", HTTP_AUTHORIZATION=f"Bearer {secret}"
        ).json()

        assert body["created"] == int(KNOWN.timestamp()) == 1_796_066_625


def test_an_unknown_admin_time_zone_stops_the_settings_from_loading():
    env = {"DJANGO_DEBUG": "true", "DJANGO_SECRET_KEY": "k" * 50, "ADMIN_OTP_REQUIRED": "false"}

    refused = manage_alone("check", env={**env, "ADMIN_TIME_ZONE": "Mars/Olympus_Mons"})
    accepted = manage_alone("check", env={**env, "ADMIN_TIME_ZONE": "America/New_York"})

    assert refused.returncode != 0
    assert "ADMIN_TIME_ZONE 'Mars/Olympus_Mons' is not a known time zone" in refused.stderr
    assert accepted.returncode == 0, accepted.stderr
