"""The second factor's idle time counts from the last code or money move, never from opening
pages; a form posted without a fresh code comes back with what was typed; the code page
tells a throttle from a wrong code."""

from __future__ import annotations

import re
import types
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group
from django.urls import reverse

from ledger_app.admin import second_factor
from ledger_app.admin.refund_form import refund_made_with
from ledger_app.admin.second_factor import FRESH_AT, HELD
from ledger_app.models import Refund, RefundLimit
from tests.factories import ChargeFactory
from tests.second_factor import current_code, device_of, verified

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

VERIFY = reverse("verify-second-factor")
START = 1_900_000_000.0  # the clock when the code is entered


@pytest.fixture
def clock(monkeypatch, settings):
    """The second factor's clock, moved by hand: `clock.at(seconds after the code)`."""
    settings.ADMIN_OTP_IDLE_MINUTES = 5
    now = {"t": START}
    monkeypatch.setattr(second_factor, "time", types.SimpleNamespace(time=lambda: now["t"]))

    def at(seconds: float) -> None:
        now["t"] = START + seconds

    return types.SimpleNamespace(at=at)


@pytest.fixture
def agent(client, support_agent, clock):
    """The support agent, who entered a code at START."""
    return verified(client, support_agent)


def refund_url(charge) -> str:
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])


def open_form(client, charge):
    """The refund form under a key of its own: (its URL, its page)."""
    minted = client.get(refund_url(charge))
    assert minted.status_code == 302 and "?form=" in minted.url, minted
    return minted.url, client.get(minted.url)


def hidden(page, name: str) -> str:
    found = re.search(rb'name="' + name.encode() + rb'" value="([^"]*)"', page.content)
    assert found, f"no hidden {name} on the page"
    return found[1].decode()


def submit(client, url, page, amount: str, **more):
    return client.post(
        url,
        {
            "amount": amount,
            "reason": "duplicate",
            "idempotency_key": hidden(page, "idempotency_key"),
            "charge_state": hidden(page, "charge_state"),
            **more,
        },
    )


def new_code(user) -> str:
    """The code the person's app shows in a later 30 s step than the one entered at START
    (a code is accepted once: the device remembers the step it was last used in)."""
    device = device_of(user)
    device.last_t = -1
    device.save(update_fields=["last_t"])
    return current_code(device)


def to_code_page(response) -> bool:
    return response.status_code == 302 and response.url.startswith(f"{VERIFY}?")


class TestIdleClock:
    def test_opening_the_refund_form_does_not_keep_the_code_fresh(self, agent, clock):
        charge = ChargeFactory(amount=1_000)

        clock.at(4 * 60)
        url, page = open_form(agent, charge)
        assert page.status_code == 200 and b'name="amount"' in page.content
        assert agent.session[FRESH_AT] == START  # looking restarted nothing
        clock.at(6 * 60 + 40)
        response = submit(agent, url, page, "4.00")

        assert to_code_page(response)
        assert not Refund.objects.exists()

    def test_a_money_move_restarts_the_idle_time(self, agent, clock):
        first, second = ChargeFactory(amount=1_000), ChargeFactory(amount=1_000)
        url, page = open_form(agent, first)
        other_url, other_page = open_form(agent, second)

        clock.at(3 * 60)
        assert submit(agent, url, page, "2.00").status_code == 302  # refunded: to the charge
        assert agent.session[FRESH_AT] == START + 3 * 60
        clock.at(7 * 60)
        done = submit(agent, other_url, other_page, "3.00")

        assert not to_code_page(done)
        assert sorted(Refund.objects.values_list("amount", flat=True)) == [200, 300]

    def test_a_refused_refund_form_is_no_money_move(self, agent, clock):
        charge = ChargeFactory(amount=1_000)
        url, page = open_form(agent, charge)

        clock.at(3 * 60)
        refused = submit(agent, url, page, "50.00")  # more than the charge

        assert refused.status_code == 200  # drawn again with its error
        assert agent.session[FRESH_AT] == START
        assert not Refund.objects.exists()

    def test_a_stale_factor_still_asks_before_the_form_is_shown(self, agent, clock):
        charge = ChargeFactory(amount=1_000)
        url, _ = open_form(agent, charge)

        clock.at(5 * 60 + 1)

        assert to_code_page(agent.get(url))


class TestHeldForm:
    def test_the_typed_form_comes_back_after_the_code_under_its_key(
        self, agent, clock, support_agent
    ):
        charge = ChargeFactory(amount=1_000)
        url, page = open_form(agent, charge)
        key = hidden(page, "idempotency_key")

        clock.at(6 * 60)
        asked = submit(agent, url, page, "4.25", note="Customer wrote twice")
        assert to_code_page(asked) and not Refund.objects.exists()
        back = agent.post(asked.url, {"code": new_code(support_agent)})
        assert back.status_code == 302 and back.url == url  # the same form, same key
        shown = agent.get(back.url)

        assert shown.status_code == 200
        assert hidden(shown, "amount") == "4.25"
        assert hidden(shown, "idempotency_key") == key
        assert b"Customer wrote twice" in shown.content
        assert b'value="duplicate" selected' in shown.content
        assert not Refund.objects.exists()  # shown, not submitted
        done = submit(agent, url, shown, "4.25", note="Customer wrote twice")
        again = submit(agent, url, shown, "4.25", note="Customer wrote twice")  # a double click
        assert done.status_code == 302 and again.status_code in (200, 302)
        assert list(Refund.objects.values_list("amount", flat=True)) == [425]
        assert refund_made_with(key) == Refund.objects.get()  # under the form's own key

    def test_secrets_and_the_csrf_token_are_never_held(self, agent, clock):
        charge = ChargeFactory(amount=1_000)
        url, page = open_form(agent, charge)

        clock.at(6 * 60)
        submit(agent, url, page, "1.00", password="hunter2", otp_code="123456", api_secret="s")

        held = dict(agent.session[HELD][urlsplit(url).path]["data"])
        assert held["amount"] == ["1.00"]
        assert not {"password", "otp_code", "api_secret", "csrfmiddlewaretoken"} & set(held)

    def test_a_held_form_is_dropped_after_the_idle_time(self, agent, clock, support_agent):
        charge = ChargeFactory(amount=1_000)
        url, page = open_form(agent, charge)
        clock.at(6 * 60)
        asked = submit(agent, url, page, "4.25")

        clock.at(12 * 60)  # the code entered more than the idle time after the form was held
        agent.post(asked.url, {"code": new_code(support_agent)})
        shown = agent.get(url)

        assert b'name="amount"' in shown.content and b"4.25" not in shown.content
        assert urlsplit(url).path not in agent.session.get(HELD, {})

    def test_the_code_page_is_sent_back_to_the_form_it_came_from(self, agent, clock):
        charge = ChargeFactory(amount=1_000)
        url, page = open_form(agent, charge)
        clock.at(6 * 60)

        asked = submit(agent, url, page, "4.25")

        assert parse_qs(urlsplit(asked.url).query)["next"] == [url]


class TestThrottle:
    @pytest.fixture
    def unverified(self, client, support_agent, settings):
        settings.OTP_TOTP_THROTTLE_FACTOR = 30  # after one wrong code, 30 s
        device_of(support_agent)
        client.force_login(support_agent)
        return client

    def test_a_wrong_code_is_not_right(self, unverified, support_agent):
        right = current_code(device_of(support_agent))
        wrong = f"{(int(right) + 1) % 1_000_000:06d}"

        response = unverified.post(VERIFY, {"code": wrong, "next": "/admin/"})

        assert response.status_code == 200
        assert b"That code is not right" in response.content
        assert b"Too many wrong codes" not in response.content

    def test_the_right_code_during_the_throttle_is_told_to_wait(self, unverified, support_agent):
        right = current_code(device_of(support_agent))
        wrong = f"{(int(right) + 1) % 1_000_000:06d}"
        unverified.post(VERIFY, {"code": wrong, "next": "/admin/"})

        response = unverified.post(VERIFY, {"code": right, "next": "/admin/"})

        text = response.content.decode()
        assert response.status_code == 200
        assert "That code is not right" not in text
        waited = re.search(r"Too many wrong codes: wait (\d+) seconds, then enter the code", text)
        assert waited and 25 <= int(waited[1]) <= 30


def test_an_add_form_comes_back_with_what_was_typed(client, django_user_model, clock):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-1-x")
    verified(client, root)
    add = reverse("admin:ledger_app_refundlimit_add")
    group = Group.objects.get(name="Support agents")

    clock.at(6 * 60)
    asked = client.post(add, {"group": group.pk, "currency": "usd", "per_refund": "123.45"})
    assert to_code_page(asked) and not RefundLimit.objects.exists()
    client.post(asked.url, {"code": new_code(root)})
    shown = client.get(add)

    assert shown.status_code == 200
    assert b'value="123.45"' in shown.content
    assert f'<option value="{group.pk}" selected>'.encode() in shown.content
    assert not RefundLimit.objects.exists()  # drawn, not saved
