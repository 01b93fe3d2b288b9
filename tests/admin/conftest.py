import pytest
from django.contrib.auth.models import Group

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
