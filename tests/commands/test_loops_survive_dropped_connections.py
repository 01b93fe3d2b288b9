"""Every long-running command (a `--loop` mode) goes on after PostgreSQL drops its
connection, between passes and during one, and dispatches what is created after."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.db import connection

from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import CustomerMail, Refund, WebhookDelivery
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.processes import ROOT, free_loopback_port, start_command_logged

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.own_server_connection,
    pytest.mark.django_db(transaction=True),
]

COMMANDS = ROOT / "ledger_app" / "management" / "commands"


def loop_commands() -> list[str]:
    """The commands that have a --loop mode: every one must survive a dropped connection."""
    names = []
    for path in sorted(COMMANDS.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        parser = load_command_class("ledger_app", path.stem).create_parser("manage.py", path.stem)
        if "--loop" in parser._option_string_actions:
            names.append(path.stem)
    return names


def new_refund() -> Refund:
    """A pending refund (worker dispatch), with its events' deliveries and its customer
    mail pending too."""
    charge = ChargeFactory(amount=1_000, receipt_email="loop@example.com")
    return create_refund(RefundRequest(charge_id=charge.id, amount=100)).item


def refund_sent(refund: Refund) -> bool:
    return Refund.objects.get(pk=refund.pk).status != Refund.Status.PENDING


def deliveries_tried(refund: Refund) -> bool:
    deliveries = WebhookDelivery.objects.filter(event__refund_id=refund.pk)
    return deliveries.exists() and not deliveries.filter(attempts=0).exists()


def mails_tried(refund: Refund) -> bool:
    """Each of its mails tried (no SMTP server listens there: retried later)."""
    mails = CustomerMail.objects.filter(refund_id=refund.pk)
    return mails.exists() and not mails.filter(attempts=0).exists()


# What each loop command is shown to dispatch: its done test for a new refund.
DISPATCHED: dict[str, Callable[[Refund], bool]] = {
    "process_refunds": refund_sent,
    "deliver_webhooks": deliveries_tried,
    "send_customer_mails": mails_tried,
}


def test_every_loop_command_is_covered():
    assert sorted(loop_commands()) == sorted(DISPATCHED)


def drop_connections(app_name: str) -> int:
    """pg_terminate_backend every connection of the command (by its application_name)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            [app_name],
        )
        return cursor.fetchone()[0]


def wait_until(done: Callable[[], bool], worker, log: Path, what: str, timeout: float = 60) -> None:
    """Until `done()`; the worker's log lines (not its tracebacks) if it exits or never is."""
    deadline = time.monotonic() + timeout
    while not done():
        if worker.poll() is None and time.monotonic() >= deadline:
            worker.kill()
            worker.wait(10)
        if worker.poll() is not None:
            err = log.read_text()
            said = "\n".join(line for line in err.splitlines()[-200:] if line[:1] != " ")
            raise AssertionError(f"{what}: exit {worker.returncode} or {timeout} s passed:\n{said}")
        time.sleep(0.1)


@pytest.fixture
def webhook_endpoint(settings):
    """An endpoint nothing listens on: every delivery is tried and retried later."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    return create_endpoint(
        url=f"http://127.0.0.1:{free_loopback_port()}/hook", enabled_events=["*"]
    )


@pytest.mark.parametrize("command", loop_commands())
def test_a_loop_goes_on_after_its_connection_is_dropped(
    command, worker_dispatch, webhook_endpoint, tmp_path: Path
):
    dispatched = DISPATCHED[command]
    app_name = f"loop-{command}-{uuid.uuid4().hex[:8]}"
    log = tmp_path / f"{command}.log"
    worker = start_command_logged(
        log,
        command,
        "--loop",
        "--poll-seconds",
        "0.2",
        # What a drop interrupts mid-item stays leased, as after a crash: not for long here.
        "--lease-seconds",
        "4",
        PGAPPNAME=app_name,
        WEBHOOK_ALLOW_PRIVATE_URLS="true",
        WEBHOOK_TIMEOUT_SECONDS="2",
        EMAIL_TIMEOUT_SECONDS="0.5",  # the lease of 4 s covers a mail's 5 steps
        EMAIL_PORT=str(free_loopback_port()),  # nothing listens: each mail is tried, retried
        SIMULATED_GATEWAY_LATENCY_MS="50",
    )
    try:
        first = new_refund()
        wait_until(lambda: dispatched(first), worker, log, "before any drop")

        # Between passes: the worker is idle, its connection open, and it is cut.
        assert drop_connections(app_name) >= 1
        time.sleep(0.5)  # at least one pass (poll 0.2 s) meets the dead connection
        after_idle_drop = new_refund()
        wait_until(lambda: dispatched(after_idle_drop), worker, log, "after a drop between passes")

        # During passes: work arrives while the connection is cut again and again.
        during = [new_refund() for _ in range(3)]
        cuts = 0
        storm_ends = time.monotonic() + 3
        while time.monotonic() < storm_ends:
            cuts += drop_connections(app_name)
            time.sleep(0.03)
        assert cuts >= 2
        after_storm = new_refund()
        for refund in [*during, after_storm]:
            wait_until(partial(dispatched, refund), worker, log, "after drops during passes")
        assert worker.poll() is None, "the worker exited"
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        worker.wait(60)

    err = log.read_text()
    assert worker.returncode == 0, err
    assert "interrupted by a database error" in err
