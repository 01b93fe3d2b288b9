"""The admin's events, endpoints and deliveries: read-only, the secret never shown, and
Resend only for staff with the resend permission."""

import pytest
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from ledger_app.access.api_keys import create_api_key
from ledger_app.events.delivery import deliver_due
from ledger_app.models import Event, WebhookDelivery, WebhookEndpoint
from tests.second_factor import verified
from tests.webhooks.conftest import record_events
from tests.webhooks.receiver import Answer

pytestmark = pytest.mark.django_db

DELIVERIES = reverse("admin:ledger_app_webhookdelivery_changelist")


def staff_client(django_user_model, *codenames: str) -> Client:
    user = django_user_model.objects.create_user("staff", password="staff-pass-123", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ledger_app", codename__in=codenames)
    )
    return verified(Client(), user)  # with a code, as every admin write needs


def resend(client: Client, *deliveries: WebhookDelivery):
    return client.post(
        DELIVERIES,
        {"action": "resend", helpers.ACTION_CHECKBOX_NAME: [d.pk for d in deliveries]},
        follow=True,
    )


@pytest.fixture
def delivered(endpoint, receiver):
    record_events(1)
    deliver_due()
    return WebhookDelivery.objects.order_by("-id").first()


def test_the_secret_is_never_shown(admin_client, endpoint, delivered):
    change = reverse("admin:ledger_app_webhookendpoint_change", args=[quote(endpoint.pk)])
    pages = [
        reverse("admin:ledger_app_webhookendpoint_changelist"),
        change,
        change.replace("/change/", "/history/"),
        DELIVERIES,
        reverse("admin:ledger_app_webhookdelivery_change", args=[delivered.pk]),
        reverse("admin:ledger_app_event_change", args=[quote(delivered.event_id)]),
    ]

    responses = [admin_client.get(page) for page in pages]

    assert [r.status_code for r in responses] == [200] * len(pages)
    assert endpoint.url.encode() in responses[1].content
    for page, response in zip(pages, responses, strict=True):
        assert endpoint.secret.encode() not in response.content, page
        assert endpoint.secret[6:20].encode() not in response.content, page


def test_endpoints_deliveries_and_events_cannot_be_changed_by_hand(admin_client, delivered):
    for model in ("webhookendpoint", "webhookdelivery", "event"):
        assert admin_client.get(reverse(f"admin:ledger_app_{model}_add")).status_code == 403
    change = reverse("admin:ledger_app_webhookdelivery_change", args=[delivered.pk])
    assert admin_client.post(change, {"status": "pending"}).status_code == 403
    delete = reverse("admin:ledger_app_webhookdelivery_delete", args=[delivered.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    delivered.refresh_from_db()
    assert delivered.status == "delivered"


def test_the_admin_makes_no_endpoint_even_below_the_limit(admin_client, endpoint, settings):
    """Endpoints are made through the API only, within its limits (the service's)."""
    settings.WEBHOOK_ENDPOINTS_TOTAL = 100
    add = reverse("admin:ledger_app_webhookendpoint_add")

    answer = admin_client.post(add, {"url": "http://127.0.0.1:9/h", "enabled_events": '["*"]'})

    assert answer.status_code == 403
    assert WebhookEndpoint.objects.count() == 1


def test_an_endpoint_page_shows_the_api_key_that_made_it(admin_client, allow_private):
    key = create_api_key(name="orders service")[1]
    made = Client(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        "/v1/webhook_endpoints",
        "url=http%3A%2F%2F127.0.0.1%3A9%2Fh&enabled_events[]=*",
        content_type="application/x-www-form-urlencoded",
    )
    change = reverse("admin:ledger_app_webhookendpoint_change", args=[made.json()["id"]])

    page = admin_client.get(change)

    assert page.status_code == 200
    assert b"orders service" in page.content
    assert key.encode() not in page.content


def test_the_delivery_list_shows_status_attempts_and_last_answer(admin_client, endpoint, receiver):
    receiver.behaviour = lambda event_id, nth: Answer(status=503)
    record_events(1)
    deliver_due()

    page = admin_client.get(DELIVERIES + "?status__exact=pending").content.decode()

    assert "charge.succeeded" in page
    # the status code and the error, in "Last answer"
    assert "503: HTTP 503; receiver said (first 64 bytes, escaped): ok" in page
    assert Event.objects.count() == 2


def test_resend_without_the_permission_is_not_offered_and_does_nothing(
    django_user_model, delivered
):
    client = staff_client(django_user_model, "view_webhookdelivery")

    page = client.get(DELIVERIES)
    posted = resend(client, delivered)

    assert page.status_code == 200 and b'value="resend"' not in page.content
    assert posted.status_code == 200
    delivered.refresh_from_db()
    assert delivered.status == "delivered"


def test_resend_with_the_permission_puts_deliveries_back_to_pending(
    django_user_model, delivered, receiver
):
    client = staff_client(django_user_model, "view_webhookdelivery", "resend_webhookdelivery")

    page = client.get(DELIVERIES)
    posted = resend(client, delivered)

    assert b'value="resend"' in page.content
    assert b"Queued to be sent again" in posted.content
    delivered.refresh_from_db()
    assert (delivered.status, delivered.leased_until) == ("pending", None)
    deliver_due()
    assert receiver.acknowledged()[delivered.event_id] == 2


def test_staff_without_view_permission_get_403(django_user_model, delivered):
    client = staff_client(django_user_model)

    for model in ("webhookendpoint", "webhookdelivery", "event"):
        url = reverse(f"admin:ledger_app_{model}_changelist")
        assert client.get(url).status_code == 403
    assert resend(client, delivered).status_code == 403
    delivered.refresh_from_db()
    assert delivered.status == "delivered"


def test_searches_are_exact_ids(admin_client, delivered):
    found = admin_client.get(DELIVERIES, {"q": delivered.event_id})
    missed = admin_client.get(DELIVERIES, {"q": delivered.event_id[:-1]})
    events = admin_client.get(reverse("admin:ledger_app_event_changelist"), {"q": "\x00"})

    assert delivered.event_id.encode() in found.content
    assert delivered.event_id.encode() not in missed.content
    assert events.status_code == 400
