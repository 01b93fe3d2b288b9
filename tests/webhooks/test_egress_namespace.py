"""Real deliveries in a network namespace of their own (`unshare -n`, loopback up, the
database over PostgreSQL's Unix socket): nothing but the namespace's own loopback receivers
can be reached, and not one disguised URL stored past the creation check reaches them."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import WebhookDelivery, WebhookEndpoint
from tests.conftest import IN_CI
from tests.processes import ROOT, command_env
from tests.webhooks.conftest import record_events
from tests.webhooks.disguises import DISGUISED

SOCKET_DIRECTORY = Path("/var/run/postgresql")  # Debian's default
RECEIVER = "http://127.0.0.1:8790/hooks"

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _missing() -> str | None:
    """Why a namespace with the database over its socket cannot be made here, or None."""
    for tool, package in (("unshare", "util-linux"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian package {package})"
    if not (SOCKET_DIRECTORY / f".s.PGSQL.{connection.settings_dict['PORT'] or 5432}").exists():
        return f"PostgreSQL has no Unix socket in {SOCKET_DIRECTORY}"
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    assert unshare and ip  # both found above
    probe = subprocess.run([unshare, "-n", ip, "link", "set", "lo", "up"], capture_output=True)
    if probe.returncode:
        return f"`unshare -n` is not allowed here (needs root): {probe.stderr.decode()[:200]}"
    return None


@pytest.fixture(autouse=True)
def _namespaces():
    """Fails under CI=true when the namespace cannot be made; elsewhere skips, saying why."""
    if connection.vendor != "postgresql":
        return  # the postgres marker says what to do
    missing = _missing()
    if missing and IN_CI:
        pytest.fail(f"CI=true and the egress namespace test cannot run: {missing}")
    if missing:
        pytest.skip(f"NOT PROVEN: the egress namespace test cannot run: {missing}")


def in_namespace(*args: str, **env: str) -> dict:
    """tests/webhooks/namespace_delivery.py in a network namespace of its own."""
    db = connection.settings_dict
    over_socket = f"postgres://{db['USER']}@{str(SOCKET_DIRECTORY).replace('/', '%2F')}"
    port = f":{db['PORT']}" if db["PORT"] else ""
    script = 'ip link set lo up && exec "$0" -m tests.webhooks.namespace_delivery "$@"'
    unshare = shutil.which("unshare")
    assert unshare, _missing()
    ran = subprocess.run(
        [unshare, "-n", "/bin/sh", "-c", script, sys.executable, *args],
        cwd=ROOT,
        env=command_env(DATABASE_URL=f"{over_socket}{port}/{db['NAME']}", **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    # Only the namespace's own loopback answers: not the database's TCP port, not the world.
    assert report["reach"] == {"receiver": True, "postgres_over_tcp": False, "outside": False}
    return report


def endpoints_at(urls: list[str], settings) -> None:
    """An endpoint per URL, stored as is: past the creation check, as if it had changed.
    The corpus is larger than the default endpoint limits, which are lifted for it (for
    the test's whole length: the fan-out to them is capped at the total too)."""
    room = len(urls) + WebhookEndpoint.objects.count()
    settings.WEBHOOK_ENDPOINTS_PER_KEY = settings.WEBHOOK_ENDPOINTS_TOTAL = room
    for url in urls:
        made = create_endpoint(url=RECEIVER, enabled_events=["*"])
        WebhookEndpoint.objects.filter(pk=made.pk).update(url=url)


class TestInANamespaceOfItsOwn:
    def test_no_disguise_reaches_the_loopback_receivers(self, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True  # only to store them
        endpoints_at(DISGUISED, settings)
        record_events(1)
        deliveries = WebhookDelivery.objects.count()

        report = in_namespace(WEBHOOK_ALLOW_PRIVATE_URLS="false")

        assert report["hits"] == []
        assert deliveries == 2 * len(DISGUISED)  # the charge's event and the one recorded
        outcomes = list(WebhookDelivery.objects.values_list("attempts", "last_status_code"))
        assert outcomes == [(1, None)] * deliveries
        errors = list(WebhookDelivery.objects.values_list("last_error", flat=True))
        assert [e for e in errors if not e.startswith("refused: ")] == []
        assert report["output"].count("refused (not sent) attempt 1: ") == deliveries

    def test_the_critical_disguises_do_hit_the_receiver_when_sent_unchecked(self):
        """The corpus is live: a bare requests.post of the finding's URL reaches 127.0.0.1."""
        report = in_namespace("--raw", "http://127.0.0.1:8790\\@8.8.8.8/")

        assert [(hit["port"], hit["path"]) for hit in report["hits"]] == [(8790, "/%5C@8.8.8.8/")]

    def test_with_private_urls_allowed_the_receiver_gets_a_signed_delivery(self, settings):
        """The positive control: the harness sees a hit when there is one."""
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        endpoint = create_endpoint(url=RECEIVER, enabled_events=["*"])
        record_events(1)

        report = in_namespace(WEBHOOK_ALLOW_PRIVATE_URLS="true")

        assert len(report["hits"]) == 2
        for hit in report["hits"]:
            timestamp, v1 = (part.split("=", 1)[1] for part in hit["signature"].split(","))
            signed = f"{timestamp}.{hit['body']}".encode()
            expected = hmac.new(endpoint.secret.encode(), signed, hashlib.sha256).hexdigest()
            assert (hit["path"], hit["host"], v1) == ("/hooks", "127.0.0.1:8790", expected)
        assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}


# Public addresses (by the registries) that the namespace's machine holds as its own, on an
# interface that is not loopback: a service there is this machine's, reached directly.
OWN = ("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
OWN_URLS = [
    f"http://{host}:{port}/hooks" for host in (OWN[0], f"[{OWN[1]}]") for port in (80, 8790)
]
OWN_ARGS = ("--own", OWN[0], "--own", OWN[1])


class TestThisMachinesOwnAddresses:
    def test_a_public_address_of_its_own_is_refused_and_its_receivers_get_nothing(self, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True  # only to store them
        endpoints_at(OWN_URLS, settings)
        record_events(1)

        report = in_namespace(*OWN_ARGS, WEBHOOK_ALLOW_PRIVATE_URLS="false")

        assert report["hits"] == []
        errors = sorted(set(WebhookDelivery.objects.values_list("last_error", flat=True)))
        assert errors == [
            f"refused: address {address} is one of this machine's own addresses "
            "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)"
            for address in sorted(OWN)
        ]
        assert report["output"].count("refused (not sent) attempt 1: ") == 2 * len(OWN_URLS)

    def test_the_receivers_on_its_own_addresses_are_live(self):
        """The control: sent unchecked, each of those URLs is answered."""
        report = in_namespace(*OWN_ARGS, "--raw", *OWN_URLS)

        got = sorted((hit["address"], hit["port"]) for hit in report["hits"])
        assert got == sorted((address, port) for address in OWN for port in (80, 8790))

    @pytest.mark.parametrize("address", OWN)
    def test_an_address_added_a_moment_ago_counts(self, address):
        report = in_namespace("--added-later", address, WEBHOOK_ALLOW_PRIVATE_URLS="false")

        assert report["checks"] == [
            "allowed",
            f"address {address} is one of this machine's own addresses "
            "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)",
        ]
