"""The audit trail outlives people: whoever issued refunds or has admin history is
deactivated, never deleted, and their refunds keep naming them."""

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.db import models, transaction
from django.db.models import ForeignObjectRel
from django.test import Client
from django.urls import reverse

from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("worker_dispatch")]

User = get_user_model()
PASSWORD = "a-long-enough-password-1"
REFUSED = b"would require deleting the following protected related objects"
DEACTIVATE_INSTEAD = b'id="deactivate-instead"'


@pytest.fixture
def refunder(succeeded_charge):
    """A staff member who issued a refund from the admin, and nothing else."""
    user = User.objects.create_user("refunder", password=PASSWORD, is_staff=True)
    create_refund(
        RefundRequest(
            charge_id=succeeded_charge.id, amount=1_000, actor=user, source=Refund.Source.ADMIN
        )
    )
    return user


@pytest.fixture
def historian(db):
    """A staff member with admin history (they changed a user) and no refunds."""
    user = User.objects.create_user("historian", password=PASSWORD, is_staff=True)
    LogEntry.objects.log_actions(
        user.pk, [user], CHANGE, change_message="Changed email.", single_object=True
    )
    return user


@pytest.fixture
def veteran(refunder):
    """Both: refunds issued and admin history."""
    LogEntry.objects.log_actions(
        refunder.pk, [refunder], CHANGE, change_message="Changed email.", single_object=True
    )
    return refunder


@pytest.fixture
def newcomer(db):
    """A user nothing names: may be deleted."""
    return User.objects.create_user("newcomer", password=PASSWORD, is_staff=True)


def audit_state(user):
    """Everything the audit trail holds about `user`, to compare before and after."""
    return (
        User.objects.filter(pk=user.pk).exists(),
        sorted(Refund.objects.filter(created_by=user).values_list("pk", flat=True)),
        sorted(LogEntry.objects.filter(user=user).values_list("pk", flat=True)),
    )


def delete_url(user):
    return reverse("admin:auth_user_delete", args=[quote(user.pk)])


def bulk_delete(client, users, *, confirmed):
    data = {"action": "delete_selected", "_selected_action": [u.pk for u in users]}
    if confirmed:
        data["post"] = "yes"
    return client.post(reverse("admin:auth_user_changelist"), data)


# Settings about a person, not records of what they did: they go with the person.
NOT_AUDIT = {("RefundLimit", "user"), ("StaffPreference", "user")}


def test_every_user_reference_in_the_ledger_protects_its_user():
    """A new foreign key to users from the ledger must not cascade or null out who acted."""
    references = [
        rel
        for rel in User._meta.get_fields(include_hidden=True)  # created_by is related_name="+"
        if isinstance(rel, ForeignObjectRel)  # a foreign key's other end
        and rel.is_relation
        and rel.auto_created
        and rel.field.model._meta.app_label == "ledger_app"  # the model holding the key
        and (rel.field.model.__name__, rel.field.name) not in NOT_AUDIT
    ]

    assert references, "Refund.created_by should be found"
    for rel in references:
        assert rel.on_delete is models.PROTECT, f"{rel.field.model.__name__}.{rel.field.name}"


@pytest.mark.parametrize("who", ["refunder", "historian", "veteran"])
class TestDeletePage:
    def test_refuses_and_says_to_deactivate(self, admin_client, request, who):
        user = request.getfixturevalue(who)

        page = admin_client.get(delete_url(user))

        assert page.status_code == 200
        assert REFUSED in page.content
        assert DEACTIVATE_INSTEAD in page.content
        assert b'name="post"' not in page.content  # no confirm button

    def test_confirming_anyway_deletes_nothing(self, admin_client, request, who):
        user = request.getfixturevalue(who)
        before = audit_state(user)

        response = admin_client.post(delete_url(user), {"post": "yes"})

        assert response.status_code == 200
        assert REFUSED in response.content
        assert audit_state(user) == before
        assert before[0] and (before[1] or before[2])
        assert all(r.created_by_id == user.pk for r in Refund.objects.filter(pk__in=before[1]))


class TestDeleteSelectedAction:
    def test_refuses_a_selection_with_audited_users_and_deletes_none_of_it(
        self, admin_client, refunder, historian, newcomer
    ):
        before = [audit_state(u) for u in (refunder, historian)]

        asked = bulk_delete(admin_client, [refunder, historian, newcomer], confirmed=False)
        confirmed = bulk_delete(admin_client, [refunder, historian, newcomer], confirmed=True)

        for response in (asked, confirmed):
            assert response.status_code == 200
            assert REFUSED in response.content
            assert DEACTIVATE_INSTEAD in response.content
            assert b"refunder</a> issued 1 refund" in response.content
            assert b"historian</a> has 1 admin history entry" in response.content
        assert [audit_state(u) for u in (refunder, historian)] == before
        assert User.objects.filter(pk=newcomer.pk).exists()

    def test_still_deletes_users_with_no_audit_rows_selected_alone(
        self, admin_client, refunder, newcomer
    ):
        asked = bulk_delete(admin_client, [newcomer], confirmed=False)
        confirmed = bulk_delete(admin_client, [newcomer], confirmed=True)

        assert asked.status_code == 200
        assert REFUSED not in asked.content
        assert confirmed.status_code == 302
        assert not User.objects.filter(pk=newcomer.pk).exists()
        assert User.objects.filter(pk=refunder.pk).exists()


class TestDeletingInCode:
    """A shell or a script is refused too: the protection is on the models, not the admin."""

    @pytest.mark.parametrize(
        ("who", "says"),
        [
            ("refunder", "Refund.created_by"),  # the PROTECT foreign key, Django's words
            ("historian", "has 1 admin history entry; deactivate them instead"),
            ("veteran", "Refund.created_by"),
        ],
    )
    @pytest.mark.parametrize("how", ["instance", "queryset"])
    def test_delete_is_refused_and_deletes_nothing(self, request, who, says, how):
        user = request.getfixturevalue(who)
        before = audit_state(user)

        delete = user.delete if how == "instance" else User.objects.filter(pk=user.pk).delete
        # The refusal may come from inside the delete's transaction; a savepoint keeps
        # this test's own transaction usable afterwards, as any caller's would need.
        with pytest.raises(models.ProtectedError) as refused, transaction.atomic():
            delete()

        assert says in str(refused.value)
        assert audit_state(user) == before

    def test_admin_history_survives_the_cascade_django_would_do(self, historian, newcomer):
        """LogEntry.user is CASCADE in Django: the pre_delete refusal must come before it,
        for everyone in the batch (the newcomer is not deleted either)."""
        before = audit_state(historian)

        with pytest.raises(models.ProtectedError), transaction.atomic():
            User.objects.filter(pk__in=[newcomer.pk, historian.pk]).delete()

        assert audit_state(historian) == before
        assert User.objects.filter(pk=newcomer.pk).exists()

    def test_a_user_without_audit_rows_is_deleted(self, newcomer):
        newcomer.delete()

        assert not User.objects.filter(username="newcomer").exists()


class TestDeactivating:
    def test_through_the_change_form_makes_someone_leave(self, admin_client, refunder):
        refund = Refund.objects.get(created_by=refunder)
        session = Client()
        session.force_login(refunder)

        response = admin_client.post(
            reverse("admin:auth_user_change", args=[quote(refunder.pk)]),
            {
                "username": refunder.username,
                "first_name": "",
                "last_name": "",
                "email": "",
                # "is_active" left out: the box is unticked
                "is_staff": "on",
                "date_joined_0": "2025-01-02",
                "date_joined_1": "03:04:05",
                "last_login_0": "",
                "last_login_1": "",
            },
        )

        assert response.status_code == 302, response.context["adminform"].form.errors
        refunder.refresh_from_db()
        assert refunder.is_active is False
        assert session.get(reverse("admin:index")).status_code == 302  # signed out
        refund.refresh_from_db()
        assert refund.created_by == refunder

    def test_a_deactivated_user_cannot_sign_in(self, refunder):
        User.objects.filter(pk=refunder.pk).update(is_active=False)
        client = Client()

        response = client.post(
            reverse("admin:login"), {"username": "refunder", "password": PASSWORD}
        )

        assert response.status_code == 200  # the form again, not a redirect in
        assert "_auth_user_id" not in client.session

    def test_refund_page_still_names_a_deactivated_issuer(self, admin_client, refunder):
        User.objects.filter(pk=refunder.pk).update(is_active=False)
        refund = Refund.objects.get(created_by=refunder)

        page = admin_client.get(reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)]))

        assert page.status_code == 200
        assert b">refunder</a>" in page.content

    def test_change_form_says_deactivating_is_how_someone_leaves(self, admin_client, newcomer):
        page = admin_client.get(reverse("admin:auth_user_change", args=[quote(newcomer.pk)]))

        assert b"Untick this to make someone leave" in page.content


def test_user_without_audit_rows_is_deleted_through_the_admin(admin_client, newcomer):
    asked = admin_client.get(delete_url(newcomer))
    confirmed = admin_client.post(delete_url(newcomer), {"post": "yes"})

    assert asked.status_code == 200
    assert b'name="post"' in asked.content
    assert DEACTIVATE_INSTEAD not in asked.content
    assert confirmed.status_code == 302
    assert not User.objects.filter(pk=newcomer.pk).exists()
