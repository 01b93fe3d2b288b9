"""The official `stripe` package against the running server, as an API client would use it."""

import pytest
import stripe
from django.core.management import call_command

from ledger_app.access.api_keys import create_api_key, revoke_api_key
from ledger_app.models import Charge, IdempotencyRecord, Refund
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants
from tests.processes import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite_pass]


@pytest.fixture
def charge(stripe_client):
    return stripe_client.v1.charges.create(
        params={
            "amount": 10_000,
            "currency": "usd",
            "description": "Headphones",
            "metadata": {"order": "A-17"},
        }
    )


class TestCharges:
    def test_create_charge(self, charge):
        stored = Charge.objects.get(pk=charge.id)
        assert (charge.object, charge.amount, charge.currency, charge.status) == (
            "charge",
            10_000,
            "usd",
            "succeeded",
        )
        assert charge.amount_refunded == 0 and charge.refunded is False
        assert charge.metadata["order"] == "A-17"
        assert stored.status == "succeeded" and stored.amount == 10_000

    def test_retrieve_with_expanded_refunds(self, stripe_client, charge):
        refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100})

        fetched = stripe_client.v1.charges.retrieve(charge.id, params={"expand": ["refunds"]})

        assert fetched.amount_refunded == 100
        assert [r.id for r in fetched.refunds.data] == [refund.id]

    def test_unknown_charge_is_404_resource_missing(self, stripe_client):
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.charges.retrieve("ch_doesnotexist")

        assert error.value.http_status == 404
        assert error.value.code == "resource_missing"


class TestRefunds:
    def test_partial_then_omitted_amount_refunds_the_rest(self, stripe_client, charge):
        first = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 2_500})
        rest = stripe_client.v1.refunds.create(params={"charge": charge.id})

        fetched = stripe_client.v1.charges.retrieve(charge.id)
        assert (first.amount, first.status, first.currency) == (2_500, "succeeded", "usd")
        assert rest.amount == 7_500
        assert fetched.amount_refunded == 10_000 and fetched.refunded is True

    def test_exact_remainder_is_allowed(self, stripe_client, charge):
        stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 6_000})

        last = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 4_000})

        assert last.amount == 4_000
        assert Charge.objects.get(pk=charge.id).amount_refunded == 10_000

    def test_over_refund_raises_invalid_request_on_amount(self, stripe_client, charge):
        stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 6_000})

        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 6_000})

        assert error.value.param == "amount"
        assert error.value.code == "amount_too_large"
        assert "($40.00)" in error.value.user_message
        assert Refund.objects.count() == 1

    def test_fully_refunded_charge_says_so(self, stripe_client, charge):
        stripe_client.v1.refunds.create(params={"charge": charge.id})

        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.refunds.create(params={"charge": charge.id})

        assert error.value.code == "charge_already_refunded"

    def test_float_amount_is_refused(self, stripe_client, charge):
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 5.5})

        assert (error.value.code, error.value.param) == ("parameter_invalid_integer", "amount")
        assert Refund.objects.count() == 0

    def test_replay_with_the_same_key_returns_the_same_refund(self, stripe_client, charge):
        options = {"idempotency_key": "order-A-17-refund"}
        first = stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 1_000}, options=options
        )

        again = stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 1_000}, options=options
        )

        assert again.id == first.id
        assert again.last_response.headers.get("Idempotent-Replayed") == "true"
        assert first.last_response.headers.get("Idempotent-Replayed") is None
        assert Refund.objects.count() == 1

    def test_reuse_of_a_key_with_another_amount_raises_idempotency_error(
        self, stripe_client, charge
    ):
        options = {"idempotency_key": "k-reuse"}
        stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 1_000}, options=options
        )

        with pytest.raises(stripe.IdempotencyError):
            stripe_client.v1.refunds.create(
                params={"charge": charge.id, "amount": 2_000}, options=options
            )

        assert Refund.objects.count() == 1
        assert Charge.objects.get(pk=charge.id).amount_refunded == 1_000

    def test_metadata_and_reason_round_trip(self, stripe_client, charge):
        refund = stripe_client.v1.refunds.create(
            params={
                "charge": charge.id,
                "amount": 100,
                "reason": "duplicate",
                "metadata": {"ticket": "T-9", "agent": "ana"},
            }
        )

        fetched = stripe_client.v1.refunds.retrieve(refund.id)
        assert fetched.reason == "duplicate"
        assert fetched.metadata.to_dict() == {"ticket": "T-9", "agent": "ana"}
        assert Refund.objects.get(pk=refund.id).source == "api"

    def test_unknown_refund_is_404(self, stripe_client):
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.refunds.retrieve("re_doesnotexist")

        assert error.value.http_status == 404

    def test_unknown_charge_in_the_body_is_400_with_param(self, stripe_client):
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.refunds.create(params={"charge": "ch_nope", "amount": 100})

        assert error.value.http_status == 400
        assert (error.value.code, error.value.param) == ("resource_missing", "charge")


class TestLists:
    def test_pages_walk_every_refund_once_newest_first(self, stripe_client, charge):
        made = [
            stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100}).id
            for _ in range(7)
        ]

        seen, page = [], stripe_client.v1.refunds.list(params={"charge": charge.id, "limit": 3})
        pages = 1
        while True:
            seen += [r.id for r in page.data]
            if not page.has_more:
                break
            page = stripe_client.v1.refunds.list(
                params={"charge": charge.id, "limit": 3, "starting_after": page.data[-1].id}
            )
            pages += 1

        assert seen == list(reversed(made))
        assert pages == 3
        assert page.url == "/v1/refunds"

    def test_auto_paging_and_ending_before(self, stripe_client, charge):
        made = [
            stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100}).id
            for _ in range(5)
        ]
        listing = stripe_client.v1.refunds.list(params={"limit": 2})

        everything = [r.id for r in listing.auto_paging_iter()]
        before = stripe_client.v1.refunds.list(params={"limit": 2, "ending_before": made[1]})

        assert everything == list(reversed(made))
        assert [r.id for r in before.data] == [made[3], made[2]]
        assert before.has_more is True

    def test_charges_list_newest_first(self, stripe_client):
        made = [ChargeFactory(amount=100 + n).id for n in range(3)]

        listing = stripe_client.v1.charges.list(params={"limit": 10})

        assert [c.id for c in listing.data] == list(reversed(made))
        assert listing.has_more is False


class TestKeys:
    def test_bad_key_raises_authentication_error(self, live_server):
        client = stripe.StripeClient(
            "sk_" + "x" * 40, base_addresses={"api": live_server.url}, max_network_retries=0
        )

        with pytest.raises(stripe.AuthenticationError):
            client.v1.charges.list()

    def test_revoked_key_raises_authentication_error(self, live_server):
        key, secret = create_api_key(name="old")
        revoke_api_key(prefix=key.prefix)
        client = stripe.StripeClient(
            secret, base_addresses={"api": live_server.url}, max_network_retries=0
        )

        with pytest.raises(stripe.AuthenticationError):
            client.v1.charges.list()

    def test_read_only_key_reads_but_cannot_refund(self, live_server, charge):
        _, secret = create_api_key(name="reporting", read_only=True)
        client = stripe.StripeClient(
            secret, base_addresses={"api": live_server.url}, max_network_retries=0
        )

        assert client.v1.charges.retrieve(charge.id).id == charge.id
        with pytest.raises(stripe.PermissionError):
            client.v1.refunds.create(params={"charge": charge.id, "amount": 100})
        assert Refund.objects.count() == 0


def readme_python_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_snippet_refunds_a_demo_charge_end_to_end(live_server, capsys):
    """The README's example, as written, with the demo key and this server's address."""
    call_command("seed_demo")
    secret = next(
        line.split()[3]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("Demo API key: sk_")
    )
    code = (
        readme_python_snippet()
        .replace('"sk_..."', repr(secret))
        .replace('"http://127.0.0.1:8000"', repr(live_server.url))
    )
    namespace: dict = {}
    stripe.max_network_retries = 0
    try:
        exec(code, namespace)  # noqa: S102 - our own README
    finally:
        stripe.api_key, stripe.api_base = None, "https://api.stripe.com"

    refund = namespace["refund"]
    printed = capsys.readouterr().out
    assert f"{refund.id} succeeded" in printed
    assert Charge.objects.get(pk="ch_demoUsdUnrefunded000001").amount_refunded == 500
    assert IdempotencyRecord.objects.get(key="order-A-17-refund-1").refund_id == refund.id
    assert_ledger_invariants()
