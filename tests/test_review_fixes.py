"""Holes a review found, each pinned by a test that fails if it reopens."""

import base64
import contextlib
import csv
import io

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from ledger_app.gateways.simulated import SimulatedGateway
from ledger_app.models import Charge, Refund
from ledger_app.services.api_keys import create_api_key
from ledger_app.services.dispatch import process_pending_refunds, send_refund
from ledger_app.services.refunds import create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db


class ForgetfulProvider(SimulatedGateway):
    """Like a provider that has dropped its idempotency keys: a resend would be a new
    refund. Counts what it is asked."""

    def __init__(self):
        self.sent = 0

    def refund(self, **kwargs):
        self.sent += 1
        return super().refund(**kwargs)


class TestNoResendWithoutAsking:
    def test_an_unknown_refund_is_looked_up_before_it_is_sent_again(self):
        charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "apply_then_timeout"})
        refund = create_refund(charge_id=charge.pk, amount=300).item
        assert refund.status == "unknown"
        provider = ForgetfulProvider()

        settled = send_refund(refund.pk, gateway=provider).item

        assert settled.status == "succeeded"
        assert provider.sent == 0
        assert ProviderRefund.objects.count() == 1

    def test_a_second_worker_attempt_asks_first(self, settings):
        settings.REFUND_DISPATCH = "worker"
        charge = ChargeFactory(amount=1_000)
        refund = create_refund(charge_id=charge.pk, amount=300).item
        SimulatedGateway().refund(  # the first attempt reached the provider, then died
            provider_key=refund.provider_idempotency_key,
            charge_reference=charge.pk,
            amount=300,
            currency="usd",
            metadata={"ledger_refund_id": refund.pk},
            timeout=5,
        )
        Refund.objects.filter(pk=refund.pk).update(dispatch_attempts=1)
        provider = ForgetfulProvider()

        process_pending_refunds(gateway=provider, lease_seconds=0)

        refund.refresh_from_db()
        assert refund.status == "succeeded" and provider.sent == 0
        assert list(
            ProviderRequest.objects.filter(operation="refund").values_list("outcome", flat=True)
        ) == ["succeeded"]

    def test_admin_retry_dispatch_asks_first(self, admin_client):
        charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "apply_then_timeout"})
        refund = create_refund(charge_id=charge.pk, amount=300).item

        admin_client.post(
            reverse("admin:ledger_app_refundattention_changelist"),
            {"action": "retry_dispatch", "_selected_action": [refund.pk]},
        )

        refund.refresh_from_db()
        assert refund.status == "succeeded"
        assert ProviderRequest.objects.filter(operation="refund").count() == 1


def test_import_refuses_dates_the_database_cannot_read_back(tmp_path):
    path = tmp_path / "charges.csv"
    path.write_text(
        "id,amount,currency,status,created\n"
        "ch_old,100,usd,succeeded,0001-01-01T00:00:00+01:00\n"
        "ch_far,100,usd,succeeded,9999-12-31T23:59:59-01:00\n",
        encoding="utf-8",
    )

    with pytest.raises(CommandError) as refused:
        call_command("import_charges", str(path), stdout=io.StringIO(), stderr=io.StringIO())

    assert refused.value.returncode == 1
    assert Charge.objects.count() == 0


@pytest.mark.parametrize("secret", ["sk_\x00" + "a" * 39, "sk_" + "é" * 40, "sk_" + "a" * 41])
def test_malformed_basic_credentials_are_401(client, secret):
    token = base64.b64encode(f"{secret}:".encode()).decode()

    response = client.get("/v1/charges", HTTP_AUTHORIZATION=f"Basic {token}")

    assert response.status_code == 401


def test_dry_run_treats_a_repeated_key_as_the_real_run_does(tmp_path):
    charge = ChargeFactory(amount=1_000)
    path = tmp_path / "in.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["charge", "amount", "idempotency_key"])
        writer.writerows(
            [[charge.pk, "600", "k1"], [charge.pk, "600", "k1"], [charge.pk, "300", "k1"]]
        )

    def outcomes(*extra):
        report = tmp_path / f"report{len(extra)}.csv"
        with contextlib.suppress(CommandError):
            call_command(
                "bulk_refund",
                str(path),
                "--batch-id",
                "b",
                "--report",
                str(report),
                *extra,
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )
        with report.open() as handle:
            return [(r["outcome"], r["code"]) for r in csv.DictReader(handle)]

    dry = outcomes("--dry-run")
    real = outcomes()

    assert dry == [
        ("would_refund", ""),
        ("would_replay", ""),
        ("refused", "idempotency_key_reused"),
    ]
    assert real == [("refunded", ""), ("replayed", ""), ("refused", "idempotency_key_reused")]


@pytest.mark.parametrize(
    ("url_name", "params"),
    [
        ("admin:ledger_app_charge_changelist", {"currency": "\x00"}),
        ("admin:ledger_app_refund_changelist", {"charge__id__exact": "\x00"}),
    ],
)
def test_nul_in_admin_filters_is_a_400_not_a_500(admin_client, url_name, params):
    assert admin_client.get(reverse(url_name), params).status_code == 400


def test_a_non_ascii_digit_user_filter_is_ignored(admin_client):
    response = admin_client.get(reverse("admin:ledger_app_refund_changelist"), {"created_by": "²"})

    assert response.status_code == 200


def test_a_charge_source_reaches_the_provider_and_the_fingerprint(client):
    api = client
    api.defaults["HTTP_AUTHORIZATION"] = f"Bearer {create_api_key(name='shop')[1]}"
    first = api.post(
        "/v1/charges",
        "amount=500&currency=usd&source=tok_mastercard",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY="ck",
    )
    other_card = api.post(
        "/v1/charges",
        "amount=500&currency=usd&source=tok_visa",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY="ck",
    )

    assert first.status_code == 200
    assert Charge.objects.get().metadata["source"] == "tok_mastercard"
    assert other_card.status_code == 400
    assert other_card.json()["error"]["type"] == "idempotency_error"


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("purge_idempotency_keys", ["--older-than", "1000000"]),
        ("process_refunds", ["--lease-seconds", "99999999999999"]),
        ("reconcile", ["--lease-seconds", "99999999999999"]),
    ],
)
def test_absurd_command_line_numbers_are_refused_not_crashed(command, args):
    with pytest.raises(CommandError) as refused:
        call_command(command, *args, stdout=io.StringIO(), stderr=io.StringIO())

    assert refused.value.returncode == 2
