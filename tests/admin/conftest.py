import pytest
from django.contrib.auth.models import Group

from ledger_app.refunds.services import RefundRequest, create_refund
from tests.second_factor import verified


@pytest.fixture
def support_agent(django_user_model):
    """A staff member in the Support agents group made by the data migration."""
    user = django_user_model.objects.create_user("agent", password="agent-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="Support agents"))
    return user


@pytest.fixture
def agent_client(client, support_agent):
    """pytest-django's test client, logged in as the support agent, who has entered a code
    from their authenticator (refunds need it)."""
    return verified(client, support_agent)


@pytest.fixture
def charge_with_a_refund(succeeded_charge, inline_dispatch):
    """A $100.00 charge with one $12.34 refund under the key `k-admin`, sent to the
    (simulated) provider: an object of each kind for the admin's pages to open."""
    refund = create_refund(
        RefundRequest(charge_id=succeeded_charge.id, amount=1_234, idempotency_key="k-admin")
    ).item
    return succeeded_charge, refund
