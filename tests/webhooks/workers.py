"""deliver_webhooks as real processes against the test database, with short timeouts,
leases and backoff so faults play out in seconds."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

from ledger_app.models import Event, WebhookDelivery
from tests.processes import ROOT, command_env

FAST = {
    "WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    "WEBHOOK_TIMEOUT_SECONDS": "0.5",
    "WEBHOOK_LEASE_SECONDS": "2",
    "WEBHOOK_BACKOFF_SECONDS": "0.1",
    "WEBHOOK_BACKOFF_MAX_SECONDS": "0.5",
}


class Worker:
    """`deliver_webhooks --loop`; its output goes to a file (read once it has exited), so
    a long run never blocks on a full pipe."""

    def __init__(self, *args: str, **env: str) -> None:
        self.output = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed with self
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "deliver_webhooks", "--loop", *args],
            cwd=ROOT,
            env=command_env(**{**FAST, **env}),
            stdout=self.output,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> str:
        """Signal it, wait for it, and return what it wrote."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
        self.output.seek(0)
        output = self.output.read()
        self.output.close()
        return output


def wait_until_all_delivered(timeout: float) -> float:
    """Seconds until no delivery is left undelivered; fails after `timeout`."""
    started = time.monotonic()
    while WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.DELIVERED).exists():
        assert time.monotonic() - started < timeout, (
            f"not all delivered after {timeout:.0f} s: "
            f"{dict(Counter(WebhookDelivery.objects.values_list('status', flat=True)))}"
        )
        time.sleep(0.1)
    return time.monotonic() - started


def stop_all(workers: list[Worker]) -> list[str]:
    """SIGTERM each; each must exit 0 (a receiver failing is not the worker failing)."""
    outputs = []
    for worker in workers:
        output = worker.stop()
        assert worker.process.returncode == 0, output[-3000:]
        outputs.append(output)
    return outputs


def duplicates_after_none_lost(acknowledged: Counter) -> int:
    """Every event was acknowledged by the receiver at least once; how many acknowledgements
    were repeats (at least once means some may be)."""
    events = set(Event.objects.values_list("id", flat=True))
    lost = events - set(acknowledged)
    assert not lost, f"{len(lost)} events never delivered: {sorted(lost)[:5]}"
    assert set(acknowledged) <= events
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}
    return sum(acknowledged.values()) - len(acknowledged)
