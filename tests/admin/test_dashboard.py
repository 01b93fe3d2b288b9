"""The admin's home page: the back office's name, the queues, today's refunds per currency
and a chart of refunds per day by reason, in the active time zone, each figure linking to
the refunds it counts; money only for people who may view refunds; a bounded number of
queries over indexed created_at ranges; nothing loaded from another host."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.utils import unquote
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from ledger_app.admin.chart import BOTTOM, TOP, stacked_bars, tick_step
from ledger_app.admin.dashboard import CHART_DAYS, refund_activity
from ledger_app.approvals.services import reject_refund
from ledger_app.models import Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
    pytest.mark.sqlite_pass,
]

INDEX = reverse("admin:index")
REFUNDS = reverse("admin:ledger_app_refund_changelist")
NEW_YORK = ZoneInfo("America/New_York")
# Three days after the United States moved their clocks forward (9 March 2025, a day of 23
# hours), in the afternoon.
NOW = datetime(2025, 3, 12, 15, 0, tzinfo=NEW_YORK)


def in_new_york(day: int, hour: int, minute: int = 0, second: int = 0, month: int = 3):
    return datetime(2025, month, day, hour, minute, second, tzinfo=NEW_YORK)


def refund_at(created_at, *, amount=1_000, currency="usd", reason=None, behaviour="succeed"):
    """A refund made through the service (so the books stay true), dated `created_at`."""
    charge = ChargeFactory(
        amount=amount, currency=currency, metadata={"simulate_refund": behaviour}
    )
    refund = create_refund(RefundRequest(charge_id=charge.pk, amount=amount, reason=reason)).item
    Refund.objects.filter(pk=refund.pk).update(created_at=created_at)
    refund.refresh_from_db()
    return refund


@pytest.fixture(autouse=True)
def _fresh_currency_list():
    """The refund list's currency filter offers the currencies seen in the last ten minutes
    (a per-process cache); a list cached by an earlier test on an empty database has no
    choices, and a filter without choices is not applied."""
    cache.delete("admin:charge-currencies")


@pytest.fixture
def canceled_at(django_user_model):
    """A refund over its requester's limit, rejected by someone else: canceled."""

    def make(created_at, amount=60_000):
        agent = django_user_model.objects.create_user(f"agent-{amount}", is_staff=True)
        RefundLimit.objects.create(user=agent, currency="usd", per_refund=100)
        charge = ChargeFactory(amount=amount, currency="usd")
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=amount, actor=agent)).item
        assert refund.status == Refund.Status.AWAITING_APPROVAL
        boss = django_user_model.objects.create_superuser(f"boss-{amount}")
        reject_refund(refund_id=refund.pk, approver=boss, note="Not ours to give.")
        Refund.objects.filter(pk=refund.pk).update(created_at=created_at)
        refund.refresh_from_db()
        return refund

    return make


@pytest.fixture
def month_of_refunds(canceled_at) -> dict[str, Refund]:
    """Refunds on several days around NOW in New York, inside the 30 days and outside."""
    made = {
        "today_duplicate": refund_at(in_new_york(12, 9), amount=1_000, reason="duplicate"),
        "today_customer": refund_at(
            in_new_york(12, 14), amount=2_500, reason="requested_by_customer"
        ),
        "today_yen": refund_at(in_new_york(12, 10), amount=1_234, currency="jpy"),
        "after_midnight": refund_at(in_new_york(12, 0, 0, 1), amount=300, reason="fraudulent"),
        "before_midnight": refund_at(in_new_york(11, 23, 59, 59), amount=400, reason="fraudulent"),
        "today_failed": refund_at(in_new_york(12, 11), amount=700, behaviour="decline"),
        "today_canceled": canceled_at(in_new_york(12, 12)),
        "clocks_changed_early": refund_at(in_new_york(9, 1, 30), reason="duplicate"),
        "clocks_changed_late": refund_at(in_new_york(9, 23, 30), reason="duplicate"),
        "first_day": refund_at(in_new_york(11, 0, 0, 1, month=2)),
        "day_before_first": refund_at(in_new_york(10, 23, 59, 59, month=2)),
        "long_ago": refund_at(in_new_york(1, 12, month=1)),
    }
    assert made["today_failed"].status == Refund.Status.FAILED
    assert made["today_canceled"].status == Refund.Status.CANCELED
    return made


def listed_ids(client, url: str) -> set[str]:
    """The refunds the admin's refund list shows at `url` (one page holds them all here)."""
    response = client.get(url)
    assert response.status_code == 200, url
    page = response.content.decode()
    assert 'class="errornote"' not in page, url
    return {
        unquote(quoted)
        for quoted in re.findall(r'href="/admin/ledger_app/refund/([^/"]+)/change/', page)
    }


def by_day(activity) -> dict[str, dict[str, int]]:
    """{"2025-03-12": {"duplicate": 1, ...}} for the days that had any refund."""
    return {
        day.day.isoformat(): {s.reason or "none": s.count for s in day.segments if s.count}
        for day in activity.days
        if day.total
    }


class TestToday:
    def test_counts_and_totals_per_currency_with_failed_and_canceled_apart(self, month_of_refunds):
        activity = refund_activity(zone=NEW_YORK, now=NOW)

        rows = {
            row.currency: (row.count, row.total, row.not_counted) for row in activity.currencies
        }
        assert rows == {"JPY": (1, "¥1,234", 0), "USD": (3, "$38.00", 2)}
        assert activity.zone == "America/New_York"
        assert activity.today.isoformat() == "2025-03-12"

    def test_each_figure_links_to_a_list_of_exactly_those_refunds(
        self, month_of_refunds, admin_client
    ):
        made = month_of_refunds
        rows = {row.currency: row for row in refund_activity(zone=NEW_YORK, now=NOW).currencies}
        usd, jpy = rows["USD"], rows["JPY"]

        assert listed_ids(admin_client, usd.url) == {
            made["today_duplicate"].pk,
            made["today_customer"].pk,
            made["after_midnight"].pk,
        }
        assert listed_ids(admin_client, usd.not_counted_url) == {
            made["today_failed"].pk,
            made["today_canceled"].pk,
        }
        assert listed_ids(admin_client, jpy.url) == {made["today_yen"].pk}

    def test_nothing_today_is_an_empty_list(self, month_of_refunds):
        activity = refund_activity(zone=NEW_YORK, now=NOW + timedelta(days=1))

        assert activity.currencies == []


class TestChart:
    def test_counts_per_day_and_reason_over_the_last_30_days(self, month_of_refunds):
        activity = refund_activity(zone=NEW_YORK, now=NOW)

        assert len(activity.days) == CHART_DAYS
        assert activity.days[0].day.isoformat() == "2025-02-11"
        assert activity.days[-1].day.isoformat() == "2025-03-12"
        assert by_day(activity) == {
            "2025-02-11": {"none": 1},
            "2025-03-09": {"duplicate": 2},
            "2025-03-11": {"fraudulent": 1},
            "2025-03-12": {
                "duplicate": 1,
                "fraudulent": 1,
                "requested_by_customer": 1,
                "none": 1,
            },
        }
        assert activity.busiest_day == 4

    def test_days_are_those_of_the_active_time_zone(self, month_of_refunds):
        """23:59:59 on the 11th in New York is 04:59:59 on the 12th in UTC."""
        in_utc = refund_activity(zone=ZoneInfo("UTC"), now=NOW)

        days = by_day(in_utc)
        assert days["2025-03-12"]["fraudulent"] == 2
        assert "2025-03-11" not in days
        usd = next(row for row in in_utc.currencies if row.currency == "USD")
        assert usd.count == 4  # the one before New York's midnight is today in UTC

    def test_segment_and_day_links_list_exactly_their_refunds(self, month_of_refunds, admin_client):
        made = month_of_refunds
        activity = refund_activity(zone=NEW_YORK, now=NOW)
        days = {day.day.isoformat(): day for day in activity.days}

        def segment(day: str, reason: str):
            return next(s for s in days[day].segments if s.reason == reason)

        assert listed_ids(admin_client, segment("2025-03-12", "fraudulent").url) == {
            made["after_midnight"].pk
        }
        assert listed_ids(admin_client, segment("2025-03-11", "fraudulent").url) == {
            made["before_midnight"].pk
        }
        assert listed_ids(admin_client, segment("2025-03-12", "").url) == {made["today_yen"].pk}
        assert listed_ids(admin_client, segment("2025-03-09", "duplicate").url) == {
            made["clocks_changed_early"].pk,
            made["clocks_changed_late"].pk,
        }
        assert listed_ids(admin_client, days["2025-02-11"].url) == {made["first_day"].pk}
        assert listed_ids(admin_client, days["2025-03-12"].url) == {
            made[name].pk
            for name in ["today_duplicate", "today_customer", "today_yen", "after_midnight"]
        }
        for day in activity.days:  # every figure the chart shows matches its list
            assert len(listed_ids(admin_client, day.url)) == day.total, day.day


class TestChartLayout:
    def test_ticks_are_round_numbers_at_or_above_the_busiest_day(self):
        assert [tick_step(n) for n in (1, 4, 5, 9, 37, 1_234)] == [1, 1, 2, 5, 10, 500]

    def test_bars_stack_from_the_axis_and_scale_to_the_top_tick(self, month_of_refunds):
        activity = refund_activity(zone=NEW_YORK, now=NOW)

        chart = stacked_bars(activity.days)

        today = [bar for bar in chart.bars if bar.segment.day == activity.today]
        assert [bar.segment.reason for bar in today] == [
            "duplicate",
            "fraudulent",
            "requested_by_customer",
            "",
        ]
        assert today[0].y + today[0].height == pytest.approx(BOTTOM, abs=0.1)
        assert today[-1].y == pytest.approx(TOP, abs=0.2)  # 4 of 4: the top tick
        assert [tick.value for tick in chart.ticks] == [0, 1, 2, 3, 4]
        assert len(chart.bars) == 7  # one per day and reason that had a refund
        assert len({bar.x for bar in today}) == 1


class TestIndexPage:
    def test_shows_queues_today_and_the_chart_with_its_table(self, admin_client):
        today = refund_at(timezone.now(), amount=1_234, currency="jpy", reason="duplicate")
        refund_at(timezone.now() - timedelta(days=3), amount=500, reason="fraudulent")

        page = admin_client.get(INDEX).content.decode()

        assert "Work waiting" in page
        assert 'Refunds today <span class="refund-zone">(UTC)</span>' in page
        assert "¥1,234" in page
        found = re.search(r"<svg class=\"refund-chart-svg\".*?</svg>", page, re.S)
        assert found, page
        svg = found.group()
        assert '<title id="refund-chart-title">' in svg and '<desc id="refund-chart-desc">' in svg
        titles = re.findall(r"<title>([^<]*)</title>", svg)
        day = today.created_at.astimezone(UTC)
        assert f"{day:%a} {day.day} {day:%b}, Duplicate: 1 refund" in titles
        assert len(titles) == 2  # one segment per day and reason with refunds
        found = re.search(r'<ul class="refund-chart-legend">.*?</ul>', page, re.S)
        assert found, page
        legend = found.group()
        assert re.findall(r"</span>([^<]+)</li>", legend) == [
            "Duplicate",
            "Fraudulent",
            "Requested by customer",
            "No reason",
        ]
        found = re.search(r'<details class="refund-chart-data">.*?</details>', page, re.S)
        assert found, page
        table = found.group()
        assert table.count('<th scope="row">') == CHART_DAYS

    def test_every_figure_on_the_page_links_to_as_many_refunds_as_it_says(
        self, admin_client, canceled_at
    ):
        now = timezone.now()
        refund_at(now, amount=1_000, reason="duplicate")
        refund_at(now, amount=2_000, reason="duplicate")
        refund_at(now, amount=300, currency="jpy")
        refund_at(now, amount=700, behaviour="decline")
        canceled_at(now)
        refund_at(now - timedelta(days=2), amount=900, reason="requested_by_customer")
        refund_at(now - timedelta(days=CHART_DAYS + 1), amount=900)

        page = html.unescape(admin_client.get(INDEX).content.decode())

        today_links = re.findall(r'<a href="(/admin/ledger_app/refund/\?[^"]+)">(\d+)<', page)
        bar_links = re.findall(
            r'<a href="(/admin/ledger_app/refund/\?[^"]+)" aria-label="[^"]*: (\d+) refunds?"',
            page,
        )
        assert len(bar_links) == 3  # today: duplicate and none; two days ago: customer
        # today: USD (2), its failed or canceled (2) and JPY (1); the chart's table: the
        # bars again (3) and the two days' totals (2)
        assert len(today_links) == 8
        for url, count in today_links + bar_links:
            assert len(listed_ids(admin_client, url)) == int(count), url

    def test_no_refunds_says_so_instead_of_an_empty_chart(self, admin_client):
        page = admin_client.get(INDEX).content.decode()

        assert "No refunds yet today." in page
        assert "No refunds in the last 30 days." in page
        assert '<svg class="refund-chart-svg"' not in page

    def test_loads_nothing_from_another_host(self, admin_client, month_of_refunds):
        refund_at(timezone.now(), reason="duplicate")

        page = admin_client.get(INDEX).content.decode()

        assert "refund-chart-svg" in page
        addresses = re.findall(r"""(?:src|href|action)\s*=\s*["']?\s*([^"'\s>]+)""", page)
        external = [a for a in addresses if re.match(r"(?i)(?:[a-z][a-z0-9+.-]*:)?//", a)]
        assert external == []
        assert "style=" not in page  # the Content-Security-Policy refuses inline styles
        scripts = re.findall(r"<script[^>]*>", page)
        assert scripts and all(re.search(r'\bsrc="/', tag) for tag in scripts), scripts


class TestWhoSeesWhat:
    def test_money_only_for_people_who_may_view_refunds(self, django_user_model):
        refund_at(timezone.now(), amount=4_321, reason="duplicate")
        looker = django_user_model.objects.create_user("looker", is_staff=True)
        looker.user_permissions.add(
            Permission.objects.get(content_type__app_label="ledger_app", codename="view_charge"),
            Permission.objects.get(
                content_type__app_label="ledger_app", codename="view_refundattention"
            ),
        )
        client = Client()
        client.force_login(looker)

        page = client.get(INDEX).content.decode()

        attention = reverse("admin:ledger_app_refundattention_changelist")
        assert f'<a href="{attention}">Refunds needing attention</a>: <strong' in page
        assert "Refunds today" not in page and "$43.21" not in page
        assert "refund-chart" not in page and REFUNDS not in page

    def test_people_who_may_view_refunds_see_the_figures(self, viewer_client):
        refund_at(timezone.now(), amount=4_321, reason="duplicate")

        page = viewer_client.get(INDEX).content.decode()

        assert "Refunds today" in page and "$43.21" in page
        assert '<svg class="refund-chart-svg"' in page

    def test_staff_with_no_permission_see_neither_queues_nor_figures(self, django_user_model):
        refund_at(timezone.now(), amount=4_321)
        client = Client()
        client.force_login(django_user_model.objects.create_user("bare", is_staff=True))

        page = client.get(INDEX).content.decode()

        assert "Work waiting" not in page and "Refunds today" not in page
        assert "$43.21" not in page


class TestCost:
    def test_the_index_runs_a_bounded_number_of_queries_whatever_the_data(
        self, admin_client, django_assert_max_num_queries, canceled_at
    ):
        with CaptureQueriesContext(connection) as empty:
            admin_client.get(INDEX)
        now = timezone.now()
        for days_ago in range(0, 40, 3):
            for reason in ["duplicate", "fraudulent", "requested_by_customer", None]:
                refund_at(now - timedelta(days=days_ago), amount=100 + days_ago, reason=reason)
        refund_at(now, amount=100, currency="jpy")
        refund_at(now, amount=100, currency="eur", behaviour="decline")
        canceled_at(now)

        # The session, the user, their time zone and device; a count per queue (five: the
        # refund queues, charges disagreeing, refunded at the provider, the books' open
        # days); today's figures and the chart; the admin log.
        with django_assert_max_num_queries(12):
            page = admin_client.get(INDEX)

        assert page.content.decode().count("<rect ") == 10 * 4  # 10 days in range, 4 reasons
        with CaptureQueriesContext(connection) as full:
            admin_client.get(INDEX)
        assert len(full) == len(empty)
        refund_queries = [q["sql"] for q in full if '"ledger_app_refund"' in q["sql"]]
        # the two queues, the refunds made at the provider, today and the chart
        assert len(refund_queries) == 5

    def test_the_figures_read_a_created_at_range_through_an_index(self, month_of_refunds):
        with CaptureQueriesContext(connection) as queries:
            refund_activity(zone=NEW_YORK, now=NOW)

        assert len(queries) == 2
        for query in queries:
            plan = explain(query["sql"])
            assert reads_a_created_at_range(plan), plan


def explain(sql: str) -> str:
    """The database's plan for `sql` (as captured, parameters inlined). On PostgreSQL with
    sequential scans discouraged, so that a usable index is taken even on a small table,
    while a created_at no index can serve (wrapped in a function) still shows as a scan."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {sql}")
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("SET LOCAL enable_seqscan = on")


def reads_a_created_at_range(plan: str) -> bool:
    """The refunds table is entered through an index, bounded on both sides by created_at:
    rows outside the range are never read."""
    if connection.vendor == "postgresql":
        return (
            "Seq Scan on ledger_app_refund" not in plan
            and re.search(r"Index Cond: .*created_at >= .*created_at < ", plan) is not None
        )
    return re.search(
        r"SEARCH ledger_app_refund USING INDEX \S+ \([^)]*created_at>\? AND created_at<\?\)", plan
    ) is not None and not re.search(r"\bSCAN ledger_app_refund\b", plan)


class TestIdentity:
    def test_the_index_is_the_refund_back_office(self, admin_client):
        page = admin_client.get(INDEX).content.decode()

        assert "<title>Home | Refund back office</title>" in page
        assert re.search(r'<div id="site-name"><a href="/admin/">Refund back office</a>', page)
        assert "Django administration" not in page and "Django site admin" not in page

    def test_the_login_page_is_the_refund_back_office(self):
        page = Client().get(reverse("admin:login")).content.decode()

        assert "<title>Log in | Refund back office</title>" in page
        assert "Refund back office</a>" in page
        assert "Django administration" not in page

    def test_every_admin_page_title_names_it(self, admin_client):
        page = admin_client.get(REFUNDS).content.decode()

        assert re.search(r"<title>[^<]* \| Refund back office</title>", page)
