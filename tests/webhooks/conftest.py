import pytest
import urllib3.util.connection
from django.db import transaction

from ledger_app.events import services as events
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import EventType
from tests.api.conftest import (  # noqa: F401 - fixtures
    api,
    api_key,
    auth,
    read_only_key,
    stripe_client,
    wsgi_in_test_transaction,
)
from tests.factories import ChargeFactory
from tests.webhooks.receiver import Receiver


@pytest.fixture
def allow_private(settings):
    """Loopback receivers are allowed (the tests' receivers run on 127.0.0.1)."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True


@pytest.fixture
def receiver():
    running = Receiver().start()
    yield running
    running.stop()


@pytest.fixture
def endpoint(db, allow_private, receiver):
    return create_endpoint(url=receiver.url, enabled_events=["*"])


def record_events(count: int, charges: int = 1) -> list[str]:
    """`count` charge.succeeded events over `charges` charges, as the services append
    them (each with a pending delivery per live endpoint); their ids, oldest first."""
    made = [ChargeFactory(amount=1_000) for _ in range(charges)]
    with transaction.atomic():
        return [
            events.record(EventType.CHARGE_SUCCEEDED, made[n % charges]).id for n in range(count)
        ]


@pytest.fixture
def no_connection(monkeypatch):
    """Any attempt to open a connection is logged, and fails."""
    tried: list = []

    def create_connection(address, *args, **kwargs):
        tried.append(address)
        raise OSError(111, "Connection refused")

    monkeypatch.setattr(urllib3.util.connection, "create_connection", create_connection)
    return tried
