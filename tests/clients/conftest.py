import pytest

from tests.clients.matrix import WEBHOOK_KEY
from tests.processes import GunicornServer
from tests.webhooks.conftest import allow_private, receiver  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    """The app as production serves it (gunicorn, DJANGO_DEBUG=false), on a free port,
    with the webhook secrets' key the tests store them under (webhook_key)."""
    served = GunicornServer(
        tmp_path_factory.mktemp("client-matrix"),
        workers=1,
        threads=4,
        WEBHOOK_SECRET_KEYS=WEBHOOK_KEY,
    )
    try:
        served.wait_ready()
        yield served
    finally:
        served.stop()


@pytest.fixture
def webhook_key(settings):
    """Webhook secrets stored here under the key the server and deliver_webhooks read."""
    settings.WEBHOOK_SECRET_KEYS = [WEBHOOK_KEY]
