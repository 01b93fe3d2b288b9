"""The admin's refund forms take only the keys they issued (issue 44, finding 10): a key
typed into the page or the URL, forged, unsigned, or another form's, is refused and
writes nothing."""

import pytest
from django.urls import reverse

from ledger_app.admin.form_keys import issued_key, new_form_key
from ledger_app.models import IdempotencyRecord, Refund
from tests.admin.refund_form_pages import (
    drawn_form,
    form_key,
    hidden,
    refund_url,
    submit,
)
from tests.factories import ChargeFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants"),
    pytest.mark.sqlite_pass,
]


class TestOnlyKeysTheFormIssued:
    """A form takes only keys the back office issued (signed when the page was drawn): a
    key typed into the page or the URL is refused and writes nothing (issue 44, 10)."""

    @pytest.mark.parametrize(
        "forged",
        [
            "admin:" + "f" * 32,  # the shape of a real key, unsigned
            "admin:" + "f" * 32 + ":" + "A" * 43,  # signed by nobody
            "order-17",  # anything at all
        ],
    )
    def test_a_forged_key_is_refused_and_writes_nothing(self, agent_client, forged):
        charge = ChargeFactory(amount=5_000)
        _key, state = drawn_form(agent_client, charge)

        response = submit(agent_client, charge, key=forged, state=state, amount="10.00")

        assert response.status_code == 200
        assert "invalid_idempotency_key" in response.content.decode()
        assert not Refund.objects.exists() and not IdempotencyRecord.objects.exists()
        charge.refresh_from_db()
        assert charge.amount_refunded == 0

    def test_another_kind_of_form_key_is_refused_too(self, agent_client):
        charge = ChargeFactory(amount=5_000)
        _key, state = drawn_form(agent_client, charge)

        response = submit(
            agent_client, charge, key=new_form_key("admin-bulk"), state=state, amount="10.00"
        )

        assert "invalid_idempotency_key" in response.content.decode()
        assert not Refund.objects.exists()

    def test_someone_elses_used_form_key_shows_nothing_of_it(self, agent_client, admin_client):
        """Replaying another person's form by its key (as the key alone used to allow)
        neither shows what it made nor refunds."""
        charge = ChargeFactory(amount=5_000)
        key, state = drawn_form(admin_client, charge)
        submit(admin_client, charge, key=key, state=state, amount="10.00")
        plain = issued_key(key)
        assert plain is not None

        response = submit(agent_client, charge, key=plain, state=state, amount="10.00")

        assert "This refund form was already used" not in response.content.decode()
        assert "invalid_idempotency_key" in response.content.decode()
        assert Refund.objects.count() == 1

    def test_a_key_typed_into_the_url_gets_a_form_of_its_own(self, agent_client):
        charge = ChargeFactory(amount=5_000)

        response = agent_client.get(refund_url(charge), {"form": "f" * 32})

        assert response.status_code == 302 and "f" * 32 not in response.url
        page = agent_client.get(response.url)
        assert issued_key(form_key(page)) is not None

    def test_the_bulk_action_refuses_a_forged_batch_key(self, agent_client):
        charges = [ChargeFactory(amount=1_000) for _ in range(2)]
        page = agent_client.post(
            reverse("admin:ledger_app_charge_changelist"),
            {"action": "refund_in_full", "_selected_action": [c.pk for c in charges]},
        )

        agent_client.post(
            reverse("admin:ledger_app_charge_changelist"),
            {
                "action": "refund_in_full",
                "_selected_action": [c.pk for c in charges],
                "post": "yes",
                "batch_key": "admin-bulk:" + "0" * 32,
                "confirmed": hidden(page, "confirmed"),
                "reason": "duplicate",
                "note": "Event cancelled",
            },
        )

        assert not Refund.objects.exists() and not IdempotencyRecord.objects.exists()
