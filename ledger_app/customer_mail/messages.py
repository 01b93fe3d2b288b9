"""A customer mail drawn as a message: subject, plain text and HTML from templates
(`templates/customer_mail/`, which REFUND_EMAIL_TEMPLATES_DIR may override), in the mail's
language, with what it tells (`CustomerMail.details`) and a link to the status page."""

from __future__ import annotations

from datetime import date
from typing import Any

from babel.dates import format_date
from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation import gettext

from ledger_app.customer_mail.links import status_url
from ledger_app.customer_mail.models import CustomerMail
from ledger_app.money import format_money


def mail_context(mail: CustomerMail) -> dict[str, Any]:
    """What the templates are given: the amount, dates and card as the customer reads
    them in their language (call it with the language active), the trace number, the
    status link."""
    details = mail.details
    language = mail.language
    last4 = details.get("card_last4", "")
    return {
        "card": card_words(last4),
        "kind": mail.kind,
        "language": language,
        "refund_id": mail.refund_id,
        "amount": format_money(details["amount"], details["currency"], locale=language),
        "card_last4": details.get("card_last4", ""),
        "reference": details.get("reference", ""),
        "made_on": written_date(date.fromisoformat(details["made_on"]), language),
        "arrival_from": written_date(date.fromisoformat(details["arrival_from"]), language),
        "arrival_to": written_date(date.fromisoformat(details["arrival_to"]), language),
        "status_url": status_url(mail.refund_id, language, mail.to),
        "link_days": settings.REFUND_STATUS_LINK_DAYS,
        "body_template": f"customer_mail/{mail.kind}.txt",
    }


def card_words(last4: str) -> str:
    """The card a refund goes back to, as a customer reads it in the active language."""
    if last4:
        return gettext("your card ending in %(card_last4)s") % {"card_last4": last4}
    return gettext("the card you paid with")


def written_date(day: date, language: str) -> str:
    """A day as the customer writes it in their language (7 December 2026, 7. Dezember 2026)."""
    return format_date(day, format="long", locale=language)


def render_mail(mail: CustomerMail) -> tuple[str, str, str]:
    """(subject, plain text, HTML) of the mail, in its language."""
    with translation.override(mail.language):
        context = mail_context(mail)
        subject = render_to_string(f"customer_mail/{mail.kind}_subject.txt", context)
        context["subject"] = " ".join(subject.split())  # one line, whatever the template
        text = render_to_string("customer_mail/message.txt", context)
        html = render_to_string("customer_mail/message.html", context)
    return context["subject"], text, html


def build_message(mail: CustomerMail) -> EmailMultiAlternatives:
    """The message as it goes to the SMTP server: its Message-ID is the mail's, the same
    on every attempt, so a receiver can tell a repeat."""
    subject, text, html = render_mail(mail)
    message = EmailMultiAlternatives(
        subject,
        text,
        settings.DEFAULT_FROM_EMAIL,
        [mail.to],
        headers={
            "Message-ID": mail.message_id,
            "Content-Language": mail.language,
            "Auto-Submitted": "auto-generated",  # RFC 3834: no vacation replies
        },
    )
    message.attach_alternative(html, "text/html")
    message.message()  # drawn now, headers and addresses encoded: what cannot be fails here
    return message
