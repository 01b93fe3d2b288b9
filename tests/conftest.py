import io
import os

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import caches
from django.db import connection
from django.test import Client, override_settings

from tests import fast_flush, migration_data, tally
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants
from tests.second_factor import verified

# Read the same way as scripts/run-tests: 1, true or yes, in any case.
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
POSTGRES_REASON = (
    "NEEDS POSTGRESQL: this test proves row locking and concurrency and cannot run on "
    f"{connection.vendor}. Set DATABASE_URL=postgres://... (make test does when one answers)."
)
_skipped_for_postgres: list[str] = []


@pytest.fixture(autouse=True, scope="session")
def _few_hashing_rounds():
    """Passwords hashed in the test process take Django's PBKDF2 with fewer rounds
    (tests/hashers.py); a test of hashing itself overrides PASSWORD_HASHERS again."""
    with override_settings(PASSWORD_HASHERS=["tests.hashers.FewRoundsPBKDF2PasswordHasher"]):
        yield


@pytest.fixture(autouse=True)
def _require_postgres(request):
    """Tests marked `postgres` skip loudly elsewhere, and fail instead under CI=true."""
    if request.node.get_closest_marker("postgres") is None or connection.vendor == "postgresql":
        return
    if IN_CI:
        pytest.fail(f"CI=true and PostgreSQL is not configured. {POSTGRES_REASON}")
    _skipped_for_postgres.append(request.node.nodeid)
    pytest.skip(POSTGRES_REASON)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After every test that touched the database, verify_ledger must find the books clean
    (tests that plant drift on purpose are marked `allows_drift`)."""
    result = yield
    if "_django_db_helper" in item.fixturenames and not item.get_closest_marker("allows_drift"):
        from django.core.management import call_command

        call_command("verify_ledger", stdout=io.StringIO())
        tally.add("every_test", invariant_checks=1)
        # The shared cache is a table no flush empties: counters one test left (failed API
        # authentications from 127.0.0.1) must not limit the next.
        caches["shared"].clear()
    return result


def pytest_configure(config):
    """Inline dispatch waits for the provider in the caller's thread during tests: a test's
    data sits in a transaction the send pool's threads could not see. The tests of the
    wait budget (tests/services/test_send_pool.py) turn it on, with committed data.
    Servers that tests start in subprocesses inherit the same default. Transactional
    tests' PostgreSQL is emptied with DELETE (tests/fast_flush.py), and what the data
    migrations wrote is written again after every flush (tests/migration_data.py)."""
    fast_flush.install()
    migration_data.install()
    from django.conf import settings

    os.environ["REFUND_INLINE_WAIT_SECONDS"] = "0"
    settings.REFUND_INLINE_WAIT_SECONDS = 0


def pytest_report_header(config):
    return f"database backend: {connection.vendor} ({connection.settings_dict['NAME']})"


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: hand this worker's tally to the controller, which prints it."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["tally"] = tally.totals()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """In the controller of a pytest-xdist run: add each worker's tally to the run's."""
    for suite, counts in getattr(node, "workeroutput", {}).get("tally", {}).items():
        tally.add(suite, **counts)


def pytest_terminal_summary(terminalreporter):
    lines = tally.summary_lines()
    if lines:
        tally.write_report(lines)
        terminalreporter.section(f"reliability tally ({connection.vendor})")
        for line in lines:
            terminalreporter.write_line(line)
    if _skipped_for_postgres:
        terminalreporter.section("NOT PROVEN: PostgreSQL tests skipped", sep="!", red=True)
        terminalreporter.write_line(
            f"{len(_skipped_for_postgres)} PostgreSQL tests were skipped; "
            "they prove nothing until they run against PostgreSQL.",
            red=True,
        )


@pytest.fixture
def ledger_invariants(request):
    """Use in a test to check the ledger invariants once the test body has run; a test
    marked `allows_drift("problem", ...)` may leave drift of those kinds."""
    yield
    marker = request.node.get_closest_marker("allows_drift")
    assert_ledger_invariants(allowed_drift=frozenset(marker.args) if marker else frozenset())


@pytest.fixture
def provider_webhook_secret(settings):
    """The secret the provider's webhooks are signed with in tests (tests/provider_webhook.py)."""
    from tests.provider_webhook import SECRET

    settings.STRIPE_WEBHOOK_SECRET = SECRET


@pytest.fixture
def worker_dispatch(settings):
    """Refunds stay pending after create_refund, for process_refunds to send."""
    settings.REFUND_DISPATCH = "worker"


@pytest.fixture
def inline_dispatch(settings):
    """create_refund sends each new refund to the provider once, right after commit."""
    settings.REFUND_DISPATCH = "inline"


@pytest.fixture
def succeeded_charge(db):
    return ChargeFactory(amount=10_000, currency="usd")


@pytest.fixture
def fully_refunded_charge(db):
    from ledger_app.refunds.services import RefundRequest, create_refund

    charge = ChargeFactory(amount=2_500, currency="usd")
    create_refund(RefundRequest(charge_id=charge.id))
    charge.refresh_from_db()
    assert charge.amount_refunded == charge.amount
    return charge


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Connections close at the end of each request in tests, so server threads (the live
    server's) leave none open that would keep the test database from being dropped."""
    from django.conf import settings

    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture
def viewer(django_user_model):
    """Staff who may look at charges and refunds but not refund."""
    user = django_user_model.objects.create_user("viewer", password="viewer-pass-1", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="ledger_app",
            codename__in=["view_charge", "view_refund", "view_refundattention"],
        )
    )
    return user


@pytest.fixture
def viewer_client(viewer):
    """The viewer, signed in with a code too: what they may not do is refused for the
    permission, not only for the missing code (every admin write needs one)."""
    return verified(Client(), viewer)


@pytest.fixture
def admin_client(admin_user):
    """pytest-django's superuser client, who has also entered a code from their
    authenticator: every admin write needs one (ledger_app/admin/write_gate.py)."""
    return verified(Client(), admin_user)
