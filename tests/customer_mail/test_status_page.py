"""The customer's refund status page (GET /refund-status/<token>), reached by the signed
link in their mail (ledger_app/customer_mail/links.py): where the refund is, in the link's
language, and nothing else about the customer or the charge. An altered link is 404, an
expired one 410, too many pages from one address 429; the answer is never cached, never
sent on as a referrer and never indexed, and the page only answers GET (and HEAD).

German is asserted only through what needs no translation file: the html lang attribute
and the amount and dates as Babel writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as project_settings
from django.core import signing
from django.urls import reverse

from ledger_app.customer_mail.links import SALT, address_digest, read_link, status_url
from ledger_app.customer_mail.services import change_address
from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.clock import start_of_a_window
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db

# A Thursday: the money should arrive 5 to 10 business days later, 12 to 19 March.
MADE_AT = datetime(2026, 3, 5, 10, 0, tzinfo=UTC)
ARN = "74987654321012345678901"
OTHER_ARN = "24492156789012345678905"
CARD = "4242"
# What the page must never show: about the customer, the charge, the refund's bookkeeping
# and the charge's other refund.
REFUND_EMAIL = "ada.lovelace@example.com"
RECEIPT_EMAIL = "receipts.ada@example.org"
CUSTOMER = "cus_Q3kPrivate9"
DESCRIPTION = "Walnut desk, order 7731"
CHARGE_METADATA = {"order_ref": "ord_hidden_5521", "shipping_zip": "SW1A-2AA"}
REFUND_METADATA = {"ticket": "zd-hidden-4411"}
NOTE = "Goodwill refund agreed on the phone"
OTHER_AMOUNT = 777  # €7.77


@pytest.fixture
def on_the_day(time_machine, settings):
    """The refund is made on MADE_AT; arrival is counted with the shipped 5 to 10 days."""
    settings.REFUND_ARRIVAL_DAYS_FROM = 5
    settings.REFUND_ARRIVAL_DAYS_TO = 10
    time_machine.move_to(MADE_AT, tick=True)


def refund_of(settings, *, behaviour: str = "succeed", dispatch: str = "inline") -> Refund:
    """A €12.50 refund of a €50 card charge paid with a card ending in 4242, with an
    address, metadata and a note, and the charge's other refund (€7.77) beside it; each
    with a trace number (ARN) stored, whatever its state."""
    settings.REFUND_DISPATCH = dispatch
    charge = ChargeFactory(
        amount=5_000,
        currency="eur",
        description=DESCRIPTION,
        customer=CUSTOMER,
        metadata={**CHARGE_METADATA, "simulate_refund": behaviour},
    )
    Charge.objects.filter(pk=charge.pk).update(card_last4=CARD, receipt_email=RECEIPT_EMAIL)
    refund = create_refund(
        RefundRequest(
            charge_id=charge.pk,
            amount=1_250,
            metadata=REFUND_METADATA,
            note=NOTE,
            instructions_email=REFUND_EMAIL,
        )
    ).item
    other = create_refund(RefundRequest(charge_id=charge.pk, amount=OTHER_AMOUNT)).item
    Refund.objects.filter(pk=refund.pk).update(destination_reference=ARN)
    Refund.objects.filter(pk=other.pk).update(destination_reference=OTHER_ARN)
    refund.refresh_from_db()
    return refund


def link_path(refund_id: str, language: str = "en") -> str:
    """The path of the link a mail to the refund's address holds: the test client asks the
    server it points at."""
    address = Refund.objects.filter(pk=refund_id).values_list("customer_email", flat=True)
    url = status_url(refund_id, language, address.first() or "")
    base = project_settings.REFUND_STATUS_BASE_URL
    assert base.startswith("https://") and url.startswith(f"{base}/refund-status/"), url
    return url.removeprefix(base)


def opened(client, path: str, address: str = "192.0.2.10"):
    return client.get(path, REMOTE_ADDR=address)


def text_of(response) -> str:
    """The page as a reader's search would see it: no-break spaces as spaces."""
    return response.content.decode().replace("\xa0", " ")


def detail(body: str, label: str) -> str:
    """The <dd> after the <dt> with this label."""
    start = body.index(f"<dt>{label}</dt><dd>") + len(f"<dt>{label}</dt><dd>")
    return body[start : body.index("</dd>", start)]


# --- what it shows ------------------------------------------------------------------------


@pytest.mark.usefixtures("on_the_day")
def test_an_english_link_shows_where_a_succeeded_refund_is(client, settings):
    refund = refund_of(settings)
    assert refund.status == Refund.Status.SUCCEEDED

    response = opened(client, link_path(refund.pk, "en"))

    assert response.status_code == 200
    assert response["Content-Language"] == "en"
    body = text_of(response)
    assert '<html lang="en">' in body
    assert 'data-state="sent"' in body and "Sent to your bank" in body
    assert detail(body, "Amount") == "€12.50"
    assert detail(body, "Paid back to") == f"your card ending in {CARD}"
    assert detail(body, "Made on") == "March 5, 2026"
    assert detail(body, "Expected on your statement") == "between March 12, 2026 and March 19, 2026"
    assert detail(body, "Trace number (ARN)") == f"<code>{ARN}</code>"


@pytest.mark.usefixtures("on_the_day")
def test_it_shows_nothing_else_about_the_customer_or_the_charge(client, settings):
    refund = refund_of(settings)
    charge = refund.charge
    other = Refund.objects.exclude(pk=refund.pk).get(charge=charge)
    # They are there to leak: the refund and its charge hold every one of them.
    assert refund.customer_email == REFUND_EMAIL and charge.receipt_email == RECEIPT_EMAIL
    assert charge.metadata["order_ref"] == CHARGE_METADATA["order_ref"]
    assert (charge.description, charge.customer) == (DESCRIPTION, CUSTOMER)
    assert refund.metadata == REFUND_METADATA

    response = opened(client, link_path(refund.pk))

    assert response.status_code == 200
    body = text_of(response)
    assert ARN in body and "€12.50" in body  # the page is the refund's, shown
    never_shown = [
        REFUND_EMAIL,
        RECEIPT_EMAIL,
        charge.pk,
        CUSTOMER,
        DESCRIPTION,
        *CHARGE_METADATA,
        *CHARGE_METADATA.values(),
        *REFUND_METADATA,
        *REFUND_METADATA.values(),
        NOTE,
        charge.payment_intent,
        other.pk,
        OTHER_ARN,
        "7.77",
        "€50",
    ]
    assert [text for text in never_shown if text and text in body] == []


@pytest.mark.usefixtures("on_the_day")
@pytest.mark.parametrize(
    ("behaviour", "dispatch", "status", "state"),
    [
        ("succeed", "worker", Refund.Status.PENDING, "on_its_way"),
        ("decline", "inline", Refund.Status.FAILED, "failed"),
    ],
    ids=["pending", "failed"],
)
def test_the_arn_is_shown_only_once_the_refund_succeeded(
    client, settings, behaviour, dispatch, status, state
):
    refund = refund_of(settings, behaviour=behaviour, dispatch=dispatch)
    assert refund.status == status and refund.destination_reference == ARN

    response = opened(client, link_path(refund.pk))

    assert response.status_code == 200
    body = text_of(response)
    assert f'data-state="{state}"' in body
    assert detail(body, "Amount") == "€12.50"
    assert detail(body, "Paid back to") == f"your card ending in {CARD}"
    assert ARN not in body and "Trace number" not in body


@pytest.mark.usefixtures("on_the_day")
def test_a_german_link_gives_a_german_page(client, settings):
    refund = refund_of(settings)

    response = opened(client, link_path(refund.pk, "de"))

    assert response.status_code == 200
    assert response["Content-Language"] == "de"
    body = text_of(response)
    assert '<html lang="de">' in body
    assert "12,50 €" in body and "€12.50" not in body
    for day in ["5. März 2026", "12. März 2026", "19. März 2026"]:
        assert day in body
    assert "March" not in body
    assert f"<code>{ARN}</code>" in body and CARD in body


# --- links that do not work -----------------------------------------------------------------


def altered(token: str, refund_id: str, other_id: str) -> dict[str, str]:
    """The link's token changed the ways a person could change it, or made up."""
    payload, _, signed = token.partition(":")
    other_payload = signing.dumps([other_id, "en", "0" * 18], salt=SALT, compress=False).partition(
        ":"
    )[0]
    last = signed[-1]
    return {
        "one-character-of-the-signature": signed[:-1] + ("A" if last != "A" else "B"),
        "the-signature-cut-short": token[:-3],
        "another-refunds-id-under-this-signature": f"{other_payload}:{signed}",
        "no-signature": payload,
        "signed-with-another-key": signing.dumps(
            [refund_id, "en", "0" * 18], key="not-this-project's-key-0123456789", salt=SALT
        ),
        "signed-for-something-else": signing.dumps(
            [refund_id, "en", "0" * 18], salt="another.salt"
        ),
        "made-up": "eyJhIjoxfQ:1uXyZw:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
    }


ALTERATIONS = [
    "one-character-of-the-signature",
    "the-signature-cut-short",
    "another-refunds-id-under-this-signature",
    "no-signature",
    "signed-with-another-key",
    "signed-for-something-else",
    "made-up",
]


@pytest.mark.usefixtures("on_the_day")
@pytest.mark.parametrize("alteration", ALTERATIONS)
def test_an_altered_link_is_not_found(client, settings, alteration):
    refund = refund_of(settings)
    other = Refund.objects.exclude(pk=refund.pk).get(charge=refund.charge)
    token = link_path(refund.pk).rsplit("/", 1)[1]
    assert opened(client, link_path(refund.pk)).status_code == 200  # as sent, it works

    response = opened(
        client, reverse("refund-status", args=[altered(token, refund.pk, other.pk)[alteration]])
    )

    assert response.status_code == 404
    body = text_of(response)
    assert "This link does not work" in body
    assert [text for text in [ARN, OTHER_ARN, "12.50", "7.77", CARD] if text in body] == []


@pytest.mark.usefixtures("on_the_day")
def test_a_link_in_a_mail_to_a_replaced_address_works_no_more(client, settings):
    refund = refund_of(settings)
    old_link = link_path(refund.pk)
    assert opened(client, old_link).status_code == 200

    change_address(
        refund_id=refund.pk, address="right@example.com", note="typo", actor="user:agent"
    )

    response = opened(client, old_link)
    assert response.status_code == 410
    assert ARN not in text_of(response) and "12.50" not in text_of(response)
    assert opened(client, link_path(refund.pk)).status_code == 200  # a mail to the new one


def test_the_address_in_a_link_is_an_hmac_under_the_secret_key(settings):
    token = status_url("re_x", "en", "ana@example.com").rsplit("/", 1)[1]
    link = read_link(token)
    assert link is not None and link.sent_to("ana@example.com") and link.sent_to(" Ana@Example.com")
    assert "ana" not in signing.b64_decode(token.partition(":")[0].encode()).decode()
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "another-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
    rotated = read_link(token)
    assert rotated is not None and rotated.sent_to("ana@example.com")  # the old key's link
    assert address_digest("ana@example.com") != link.address_digest  # a new key, a new HMAC


def test_a_signed_link_to_a_refund_that_is_not_there_is_not_found(client):
    response = opened(client, link_path("re_NoSuchRefund000000000000"))

    assert response.status_code == 404
    assert "This link does not work" in text_of(response)


@pytest.mark.usefixtures("on_the_day")
@pytest.mark.parametrize("language", ["en", "de"])
def test_a_link_past_its_days_has_expired(client, settings, time_machine, language):
    refund = refund_of(settings)
    path = link_path(refund.pk, language)  # the mail is sent as the refund is made
    days = settings.REFUND_STATUS_LINK_DAYS

    time_machine.move_to(MADE_AT + timedelta(days=days, minutes=-1), tick=True)
    assert opened(client, path).status_code == 200  # its last minute
    time_machine.move_to(MADE_AT + timedelta(days=days, minutes=1), tick=True)
    response = opened(client, path)

    assert response.status_code == 410
    body = text_of(response)
    assert f'<html lang="{language}">' in body and response["Content-Language"] == language
    assert [text for text in [ARN, "12.50", "12,50", CARD, "2026"] if text in body] == []


# --- too many pages from one address ------------------------------------------------------


@pytest.fixture
def three_a_minute(settings, time_machine):
    settings.REFUND_STATUS_PAGES_PER_MINUTE = 3
    # A test's requests all fall into one window: its clock starts a second into a new one.
    time_machine.move_to(start_of_a_window(60), tick=True)


@pytest.mark.usefixtures("three_a_minute")
def test_too_many_pages_from_one_address_are_refused_until_the_minute_ends(
    client, settings, time_machine
):
    refund = refund_of(settings)
    path = link_path(refund.pk)

    answers = [opened(client, path).status_code for _ in range(4)]
    refused = opened(client, path)

    assert answers == [200, 200, 200, 429] and refused.status_code == 429
    wait = int(refused["Retry-After"])
    assert 1 <= wait <= 60
    body = text_of(refused)
    assert "Too many pages were opened from here just now" in body
    assert [text for text in [ARN, "12.50", CARD] if text in body] == []
    assert opened(client, path, address="198.51.100.7").status_code == 200  # others may
    time_machine.shift(timedelta(seconds=wait))
    assert opened(client, path).status_code == 200  # when Retry-After said


@pytest.mark.usefixtures("three_a_minute")
def test_altered_links_count_too(client, settings):
    """Guessing tokens is what the limit is for: a wrong one counts like a right one."""
    refund = refund_of(settings)

    wrong = [opened(client, "/refund-status/guess-" + str(n)).status_code for n in range(3)]

    assert wrong == [404, 404, 404]
    assert opened(client, link_path(refund.pk)).status_code == 429


# --- how it is answered ---------------------------------------------------------------------


def every_answer(client, settings, time_machine) -> dict[str, Any]:
    """The page as shown, and each refusal, with the status it has."""
    refund = refund_of(settings)
    path = link_path(refund.pk)
    answers = {"shown": opened(client, path)}
    answers["not-found"] = opened(client, path[:-2])
    settings.REFUND_STATUS_PAGES_PER_MINUTE = 2
    answers["busy"] = opened(client, path)
    time_machine.shift(timedelta(days=settings.REFUND_STATUS_LINK_DAYS + 1))
    answers["expired"] = opened(client, path, address="198.51.100.7")
    return answers


@pytest.mark.usefixtures("three_a_minute")
def test_no_answer_is_cached_sent_as_a_referrer_or_indexed(client, settings, time_machine):
    answers = every_answer(client, settings, time_machine)

    statuses = {name: response.status_code for name, response in answers.items()}
    assert statuses == {"shown": 200, "not-found": 404, "busy": 429, "expired": 410}
    for name, response in answers.items():
        cache = [part.strip().lower() for part in response["Cache-Control"].split(",")]
        robots = [part.strip().lower() for part in response["X-Robots-Tag"].split(",")]
        assert "no-store" in cache, name
        assert response["Referrer-Policy"] == "no-referrer", name
        assert "noindex" in robots, name
        assert '<meta name="robots" content="noindex' in text_of(response), name


@pytest.mark.usefixtures("on_the_day")
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_only_get_and_head_are_answered(client, settings, method):
    refund = refund_of(settings)
    path = link_path(refund.pk)

    response = getattr(client, method)(path, REMOTE_ADDR="192.0.2.10")

    assert response.status_code == 405
    assert sorted(part.strip() for part in response["Allow"].split(",")) == ["GET", "HEAD"]
    assert ARN not in response.content.decode()
    assert client.head(path).status_code == 200
