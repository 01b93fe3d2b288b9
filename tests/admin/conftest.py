import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client


@pytest.fixture
def support_agent(django_user_model):
    """A staff member in the Support agents group made by the data migration."""
    user = django_user_model.objects.create_user("agent", password="agent-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="Support agents"))
    return user


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
def agent_client(support_agent):
    client = Client()
    client.force_login(support_agent)
    return client


@pytest.fixture
def viewer_client(viewer):
    client = Client()
    client.force_login(viewer)
    return client
