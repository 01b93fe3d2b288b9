"""Customer mails on PostgreSQL through a real SMTP server on loopback, sent by the
sender as a real process: one mail per change a customer cares about, in their language,
with links that open the status page, and none for a refund waiting for approval; a
sender killed mid-batch never sends a mail twice; refusals, retries and bounces are
recorded where staff see them."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ledger_app.approvals.services import approve_refund
from ledger_app.customer_mail.links import read_link
from ledger_app.customer_mail.models import CustomerMail
from ledger_app.customer_mail.sending import claim, send_due, send_one
from ledger_app.customer_mail.services import change_address, resend_last
from ledger_app.customer_mail.sink import Keeper, Received
from ledger_app.models import Refund
from ledger_app.money import format_money
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import news
from tests.customer_mail.mailbox import (
    STATUS_LINK,
    by_message_id,
    html_of,
    mails_of,
    many_refunds,
    send_mails,
    sender_env,
    smtp_server,
    status_path,
    text_of,
)
from tests.factories import AGENTS_MIGRATION, LEADS_MIGRATION, ChargeFactory, migration_group
from tests.processes import kill_at, start_command
from tests.services.people import set_limit, staff

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MADE, SUCCEEDED, FAILED = "refund_made", "refund_succeeded", "refund_failed"
REFERENCE = "refund_reference"


def refund(charge_id: str, amount: int, actor=None) -> Refund:
    return create_refund(RefundRequest(charge_id=charge_id, amount=amount, actor=actor)).item


@pytest.fixture
def arn_at_once(settings):
    settings.SIMULATED_ARN_DELAY_SECONDS = 0  # the card network's reference with the success


@pytest.mark.usefixtures("arn_at_once")
def test_one_mail_per_change_in_each_language_and_none_until_approved(client, django_user_model):
    english = ChargeFactory(amount=5_000, receipt_email="ana@example.com", card_last4="4242")
    german = ChargeFactory(
        amount=9_000,
        currency="eur",
        metadata={"locale": "de-AT"},
        receipt_email="ben@example.com",
        card_last4="1881",
    )
    failing = ChargeFactory(
        amount=3_000,
        metadata={"simulate_refund": "succeed_then_fail"},
        receipt_email="cy@example.com",
    )
    waiting = ChargeFactory(amount=8_000, receipt_email="dee@example.com")
    silent = ChargeFactory(amount=1_000)  # no address: nobody to tell
    agent = staff(django_user_model, "agent", migration_group(AGENTS_MIGRATION))
    lead = staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))
    set_limit(user=agent, per_refund=1_000)

    to_ana = refund(english.id, 1_250)
    to_ben = create_refund(
        RefundRequest(charge_id=german.id, amount=2_000, instructions_email="ben.neu@example.de")
    ).item
    to_cy = refund(failing.id, 3_000)
    held = refund(waiting.id, 5_000, actor=agent)  # over the agent's limit
    refund(silent.id, 500)
    assert held.status == Refund.Status.AWAITING_APPROVAL
    news.advance()  # the card of cy's charge was closed: the provider fails the refund
    call_command("reconcile", stdout=None)  # ...and the re-check hears of it
    assert Refund.objects.get(pk=to_cy.pk).status == Refund.Status.FAILED

    with smtp_server() as (keeper, port):
        send_mails(port)
        assert mails_of(held.pk) == []  # waiting for a lead: nothing said
        approve_refund(refund_id=held.pk, approver=lead, note="checked the order")
        send_mails(port)
        send_mails(port)  # a third run finds nothing left: each mail went once

    sent = by_message_id(keeper)
    mails = list(CustomerMail.objects.order_by("id"))
    assert {m.message_id for m in mails} == set(sent)
    assert all(len(copies) == 1 for copies in sent.values())
    assert all(m.status == CustomerMail.Status.SENT and m.attempts == 1 for m in mails)
    assert mails_of(to_ana.pk) == [(MADE, "sent"), (SUCCEEDED, "sent")]
    assert mails_of(to_ben.pk) == [(MADE, "sent"), (SUCCEEDED, "sent")]
    assert mails_of(to_cy.pk) == [(MADE, "sent"), (SUCCEEDED, "sent"), (FAILED, "sent")]
    assert mails_of(held.pk) == [(MADE, "sent"), (SUCCEEDED, "sent")]
    assert CustomerMail.objects.count() == 9  # the silent charge's refund: none

    def received(refund: Refund, kind: str) -> Received:
        mail = CustomerMail.objects.get(refund=refund, kind=kind)
        (copy,) = sent[mail.message_id]
        assert copy.recipients == [mail.to]
        return copy

    ana_made, ana_done = received(to_ana, MADE), received(to_ana, SUCCEEDED)
    assert ana_made.message["Subject"] == "Your refund of $12.50 is on its way"
    assert "We have refunded $12.50 to your card ending in 4242 on" in text_of(ana_made)
    arn = Refund.objects.get(pk=to_ana.pk).destination_reference
    assert len(arn) == 23
    assert ana_done.message["Subject"] == "Your refund of $12.50 has been sent to your bank"
    assert f"trace number (ARN), which it can find the refund by: {arn}" in text_of(ana_done)
    assert arn in html_of(ana_done)
    assert ana_made.message["Content-Language"] == "en"

    ben_made = received(to_ben, MADE)
    assert ben_made.recipients == ["ben.neu@example.de"]  # the address given with the refund
    euros = format_money(2_000, "eur", locale="de")  # 20,00 € with Babel's own space
    subject = " ".join(str(ben_made.message["Subject"]).split())  # headers fold spaces
    assert subject == " ".join(f"Ihre Erstattung über {euros} ist unterwegs".split())
    assert "auf Ihre Karte mit der Endung 1881 erstattet" in text_of(ben_made)
    assert '<html lang="de">' in html_of(ben_made)
    cy_failed = received(to_cy, FAILED)
    assert cy_failed.message["Subject"] == "Your refund of $30.00 could not be paid to your card"
    assert "Our support team will contact you" in text_of(cy_failed)
    assert "the card you paid with" in text_of(cy_failed)  # no card digits on the charge

    # Each link opens the refund's own status page, in the mail's language.
    page = client.get(status_path(ana_done))
    assert page.status_code == 200
    assert "$12.50" in page.text and arn in page.text and 'data-state="sent"' in page.text
    german_page = client.get(status_path(ben_made))
    assert german_page.status_code == 200
    assert '<html lang="de">' in german_page.text and "20,00" in german_page.text
    assert "Erstattet auf" in german_page.text  # the German words, from locale/de
    failed_page = client.get(status_path(cy_failed))
    assert 'data-state="failed"' in failed_page.text


class Holding:
    """An SMTP server that takes the `number`-th mail and then holds its answer until
    released: the mail is the server's, the sender has not heard so."""

    def __init__(self, number: int) -> None:
        self.number, self.seen = number, 0
        self.holding, self.release = threading.Event(), threading.Event()

    def answer(self, received: Received) -> str | None:
        self.seen += 1
        if self.seen == self.number:
            self.taken = received
            self.holding.set()
            self.release.wait(30)  # the sender is killed meanwhile
        return None


def lease_runs_out() -> None:
    """What the killed sender claimed stays leased until its lease runs out: now."""
    CustomerMail.objects.filter(leased_until__isnull=False).update(
        leased_until=timezone.now() - timedelta(seconds=1)
    )


def test_a_sender_killed_mid_batch_sends_no_mail_twice():
    refunds = many_refunds(6)  # 12 mails: made and succeeded each
    holding = Holding(number=4)
    with smtp_server(Keeper(answer=holding.answer)) as (keeper, port):
        sender = start_command("send_customer_mails", "--once", **sender_env(port))
        assert holding.holding.wait(60), "the sender never reached the fourth mail"
        sender.kill()  # between handing the 4th mail over and recording the answer
        sender.wait(10)
        holding.release.set()
        stranded = CustomerMail.objects.get(message_id=holding.taken.message["Message-ID"])
        assert stranded.status == CustomerMail.Status.SENDING
        lease_runs_out()
        send_mails(port)

    sent = by_message_id(keeper)
    mails = list(CustomerMail.objects.filter(refund__in=refunds))
    assert len(mails) == 12
    # The server has every mail exactly once: the held one too (it took it), never again.
    assert sorted(sent) == sorted(m.message_id for m in mails)
    assert all(len(copies) == 1 for copies in sent.values())
    stranded.refresh_from_db()
    assert stranded.status == CustomerMail.Status.UNKNOWN
    assert "not sent again by itself" in stranded.outcome
    assert {m.status for m in mails if m.pk != stranded.pk} == {CustomerMail.Status.SENT}


def test_a_sender_killed_before_handing_over_leaves_it_for_a_person_to_resend(settings):
    settings.REFUND_DISPATCH = "worker"  # the refund waits for its worker: one mail, "made"
    (only,) = many_refunds(1)
    (stranded,) = CustomerMail.objects.filter(refund=only)
    with smtp_server() as (keeper, port):
        kill_at("mail.sending", "send_customer_mails", "--once", **sender_env(port))
        lease_runs_out()
        send_mails(port)
        stranded.refresh_from_db()
        assert stranded.status == CustomerMail.Status.UNKNOWN
        assert keeper.received == []  # never handed over, and not sent again by itself
        resend = resend_last(refund_id=only.pk, actor="user:agent")  # a person's word
        send_mails(port)
    resend.refresh_from_db()
    assert resend.status == CustomerMail.Status.SENT
    assert resend.resend_of == stranded and resend.requested_by == "user:agent"
    assert resend.kind == MADE and resend.message_id != stranded.message_id
    ((copy,),) = by_message_id(keeper).values()  # the customer got the mail once
    assert copy.message["Subject"] == "Your refund of $7.00 is on its way"


def slowly(received: Received) -> None:
    time.sleep(0.2)  # each mail takes a while: both senders have their hands full


def test_two_senders_side_by_side_send_each_mail_once():
    refunds = many_refunds(10)  # 20 mails
    with smtp_server(Keeper(answer=slowly)) as (keeper, port):
        senders = [
            start_command("send_customer_mails", "--once", "--batch-size", "3", **sender_env(port))
            for _ in range(2)
        ]
        said = []
        for sender in senders:
            out, err = sender.communicate(timeout=120)
            assert sender.returncode == 0, err
            said.append(out.count(": sent ("))
    assert sum(said) == 20 and min(said) > 0, said  # both sent, neither the other's
    sent = by_message_id(keeper)
    mails = CustomerMail.objects.filter(refund__in=refunds)
    assert sorted(sent) == sorted(m.message_id for m in mails) and len(sent) == 20
    assert all(len(copies) == 1 for copies in sent.values())
    assert {m.status for m in mails} == {CustomerMail.Status.SENT}


def test_the_trace_number_that_comes_later_is_its_own_mail(time_machine):
    time_machine.move_to(timezone.now() - timedelta(minutes=5), tick=True)  # the refund's day
    charge = ChargeFactory(amount=2_000, receipt_email="ana@example.com", card_last4="4242")
    made = refund(charge.id, 700)  # succeeded; the card network's number comes a minute later
    assert Refund.objects.get(pk=made.pk).destination_reference == ""
    time_machine.move_to(timezone.now() + timedelta(minutes=5), tick=True)  # back to now
    call_command("reconcile", stdout=None)  # the re-check hears of the ARN
    arn = Refund.objects.get(pk=made.pk).destination_reference
    assert len(arn) == 23
    with smtp_server() as (keeper, port):
        send_mails(port)
    assert mails_of(made.pk) == [(MADE, "sent"), (SUCCEEDED, "sent"), (REFERENCE, "sent")]
    told = CustomerMail.objects.get(refund=made, kind=REFERENCE)
    (copy,) = by_message_id(keeper)[told.message_id]
    assert copy.message["Subject"] == "The trace number of your refund of $7.00"
    assert f"now has a trace number (ARN): {arn}" in text_of(copy)
    succeeded = CustomerMail.objects.get(refund=made, kind=SUCCEEDED)
    assert arn not in text_of(by_message_id(keeper)[succeeded.message_id][0])


def test_a_mail_whose_address_changed_after_it_was_claimed_goes_to_the_new_one(mailoutbox):
    (only,) = many_refunds(1)
    lease, batch = claim(due_at=timezone.now(), size=10, lease_seconds=60)
    assert len(batch) == 2 and {m.to for m in batch} == {"c0@example.com"}
    change_address(refund_id=only.pk, address="new@example.com", note="typo", actor="user:a")
    attempts = [send_one(mail, lease, 60) for mail in batch]  # Django's test outbox
    assert [a.outcome for a in attempts] == ["sent", "sent"]
    assert [m.to for m in mailoutbox] == [["new@example.com"]] * 2
    for message in mailoutbox:  # and its link is one for the new address
        found = STATUS_LINK.search(message.body)
        assert found is not None
        link = read_link(found.group(1).rsplit("/", 1)[1])
        assert link is not None and link.sent_to("new@example.com")
        assert not link.sent_to("c0@example.com")


def test_a_mail_retried_after_its_address_changed_goes_to_the_new_one(settings):
    (only,) = many_refunds(1)
    lease, batch = claim(due_at=timezone.now(), size=10, lease_seconds=60)
    settings.EMAIL_BACKEND = "tests.customer_mail.mailbox.RefusedForNow"
    # staff change the address while the first mail is being handed over (refused for now)
    Refund.objects.filter(pk=only.pk).update(customer_email="new@example.com")
    attempts = [send_one(mail, lease, 60) for mail in batch]
    assert [a.outcome for a in attempts] == ["retrying", "retrying"]
    assert set(CustomerMail.objects.values_list("to", "status")) == {("new@example.com", "pending")}
    assert set(CustomerMail.objects.values_list("to", flat=True)) == {"new@example.com"}


def test_no_answer_is_unknown_and_an_unsendable_mail_does_not_stop_the_others(settings):
    first, second = many_refunds(2)
    CustomerMail.objects.filter(refund=first).update(to="a@b\ufffdc.com")  # older rows, say
    settings.EMAIL_BACKEND = "tests.customer_mail.mailbox.DroppedAfterData"
    tally = send_due()
    assert tally.statuses == {"refused": 2, "unknown": 2}
    assert {m.status for m in CustomerMail.objects.filter(refund=first)} == {"refused"}
    assert all(
        m.outcome.startswith("not sent: could not be drawn")
        for m in CustomerMail.objects.filter(refund=first)
    )
    unknown = CustomerMail.objects.filter(refund=second)
    assert {(m.status, m.attempts) for m in unknown} == {("unknown", 1)}
    assert all(m.outcome.startswith("no answer: SMTPServerDisconnected") for m in unknown)
    assert send_due().statuses == {}  # none is tried again by itself


def test_no_mail_is_written_when_switched_off_or_with_no_address(settings):
    settings.REFUND_EMAILS = False
    charge = ChargeFactory(receipt_email="ana@example.com")
    refund(charge.id, 100)
    settings.REFUND_EMAILS = True
    refund(ChargeFactory().id, 100)
    assert CustomerMail.objects.count() == 0
    refund(charge.id, 100)  # on again, with an address: the change and its success told
    assert CustomerMail.objects.count() == 2
