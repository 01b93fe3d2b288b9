"""A refund's customer mails on its admin page: every mail written for it, with what became
of each, the address changes staff made and where its mails go now; and two buttons, "Resend
last mail…" and "Change mail address…", links to a confirmation page and a form that post
to their service (ledger_app.customer_mail.services: resend_last, change_address).

What they post is an admin write, so the write gate (write_gate.py) asks for a fresh second
factor first; neither moves money. Both are for those who may refund
(`ledger_app.refund_charge`): others see no button and are refused the pages."""

from __future__ import annotations

import logging

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from typing_extensions import override

from ledger_app import errors
from ledger_app.admin.base import ReadOnlyAdminMixin
from ledger_app.admin.second_factor import take_held_form
from ledger_app.customer_mail.models import MailStatus
from ledger_app.customer_mail.services import change_address, resend_last
from ledger_app.db import connection_lost, drop_broken_connection
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import actor_label

log = logging.getLogger("ledger_app.admin")

# The refund page's fields this module draws (RefundAdmin shows them after its own).
MAIL_FIELDS = ("customer_email_display", "customer_mails_display", "address_changes_display")

NO_ADDRESS = "no address: no mails are sent"

# What a mail's status means for the customer, where it did not (or may not have) reached
# them: shown in bold, then what the SMTP server or the bounce said.
NOT_DELIVERED = {
    MailStatus.UNKNOWN.value: (
        "May not have been sent: the sender stopped while the SMTP server had it, and it is "
        "not sent again by itself"
    ),
    MailStatus.REFUSED.value: (
        "Not delivered: the SMTP server refused it, or it gave up after its retries"
    ),
    MailStatus.BOUNCED.value: "Not delivered: it came back",
}

DATABASE_UNAVAILABLE = (
    "The database did not answer, so this may or may not have been done: look at the "
    "refund's customer mails below before trying again (database_unavailable)."
)


class MailAddressForm(forms.Form):
    """The new address and why. Both are checked by change_address, which says what is
    wrong with its code (`email_invalid`, `note_required`): the form only carries them."""

    address = forms.CharField(
        label="New address",
        required=False,
        widget=forms.EmailInput(attrs={"autocomplete": "off", "size": 40}),
        help_text="Every mail of this refund written from now on goes here, and so do its "
        "mails still waiting to be sent.",
    )
    note = forms.CharField(
        label="Note",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Required: why the address changed (who asked, how it was checked).",
    )


class CustomerMailViews(ReadOnlyAdminMixin):
    """For the refund admin (and the queues built on it): the customer mail fields of a
    refund's page, its two buttons and the pages they open."""

    def get_urls(self):
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path(
                "<path:object_id>/resend-mail/",
                self.admin_site.admin_view(self.resend_mail_view),
                name=f"{info}_resend_mail",
            ),
            path(
                "<path:object_id>/mail-address/",
                self.admin_site.admin_view(self.mail_address_view),
                name=f"{info}_mail_address",
            ),
        ]
        return [*own, *super().get_urls()]

    def may_act_on_mails(self, request: HttpRequest) -> bool:
        return self.has_refund_permission(request) and self.has_view_permission(request)

    @override  # the signature is ModelAdmin's
    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        """The buttons, for those who may refund; "Resend last mail…" only when the refund
        has a mail to resend."""
        if obj is not None and self.may_act_on_mails(request):
            context["mail_address_url"] = self._own_url("mail_address", obj)
            if obj.customer_mails.exists():
                context["resend_mail_url"] = self._own_url("resend_mail", obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="Customer mail address")
    def customer_email_display(self, obj: Refund) -> str:
        return obj.customer_email or NO_ADDRESS

    @admin.display(description="Customer mails")
    def customer_mails_display(self, obj: Refund) -> str:
        """Every mail of the refund, newest first, with its status and what the SMTP server
        or the bounce said."""
        mails = list(obj.customer_mails.order_by("-created_at", "-id"))
        if not mails:
            return "None written"
        rows = [(mail, NOT_DELIVERED.get(mail.status, "")) for mail in mails]
        return render_to_string("admin/ledger_app/refund/customer_mails.html", {"rows": rows})

    @admin.display(description="Mail address changes")
    def address_changes_display(self, obj: Refund) -> str:
        changes = list(obj.mail_addresses.order_by("-changed_at", "-id"))
        if not changes:
            return "None"
        return render_to_string(
            "admin/ledger_app/refund/mail_address_changes.html", {"changes": changes}
        )

    def resend_mail_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A page that says which mail is resent and where to; confirming it (post=yes)
        writes the resend (resend_last) and goes back to the refund's page."""
        refund = self._refund_to_act_on(request, object_id)
        if request.method == "POST" and request.POST.get("post") == "yes":
            return self._resend(request, refund)
        take_held_form(request)  # a confirmation posted before the code: shown again, not acted on
        last = refund.customer_mails.order_by("-id").first()
        return TemplateResponse(
            request,
            "admin/ledger_app/refund/resend_mail.html",
            {
                **self.page_context(request, "Resend the last customer mail"),
                "refund": refund,
                "last": last,
                "no_address": NO_ADDRESS,
                "media": self.media,
            },
        )

    def mail_address_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The form; submitted (post=yes), change_address, then back to the refund's page,
        or the form again with what was wrong."""
        refund = self._refund_to_act_on(request, object_id)
        if request.method == "POST" and request.POST.get("post") == "yes":
            form = MailAddressForm(request.POST)
            if form.is_valid():
                done = self._change_address(request, refund, form)
                if done is not None:
                    return done
            else:
                self.message_user(request, "The address was not changed.", messages.ERROR)
        else:
            held = take_held_form(request)  # typed before the code page: shown, not submitted
            form = MailAddressForm(
                initial={} if held is None else {k: held.get(k, "") for k in ("address", "note")}
            )
        return TemplateResponse(
            request,
            "admin/ledger_app/refund/mail_address.html",
            {
                **self.page_context(request, "Change where this refund's mails go"),
                "refund": refund,
                "form": form,
                "no_address": NO_ADDRESS,
                "media": self.media + form.media,
            },
        )

    def _resend(self, request: HttpRequest, refund: Refund) -> HttpResponse:
        try:
            mail = resend_last(refund_id=refund.pk, actor=_actor(request))
        except errors.LedgerError as exc:
            self.message_user(
                request, f"Nothing was resent: {exc.message} ({exc.code})", messages.ERROR
            )
            return self._back_to(refund)
        except DatabaseError as exc:
            self._lost_database(request, exc, "resending a mail of", refund)
            return self._back_to(refund)
        told = f"Resent the last customer mail ({mail.get_kind_display()}) to {mail.to}"
        self.log_change(request, _concrete(refund), told)
        self.message_user(
            request, f"{told}: it is waiting to be sent (by {mail.requested_by}).", messages.SUCCESS
        )
        return self._back_to(refund)

    def _change_address(
        self, request: HttpRequest, refund: Refund, form: MailAddressForm
    ) -> HttpResponse | None:
        """The change made and the refund's page; None (the form is drawn again, with what
        was wrong) when the service refused it or the database did not answer."""
        try:
            change = change_address(
                refund_id=refund.pk,
                address=form.cleaned_data["address"],
                note=form.cleaned_data["note"],
                actor=_actor(request),
            )
        except errors.LedgerError as exc:
            field = {"to": "address", "note": "note"}.get(exc.param or "")
            form.add_error(field, f"{exc.message} ({exc.code})")
            self.message_user(
                request, f"The address was not changed: {exc.message} ({exc.code})", messages.ERROR
            )
            return None
        except DatabaseError as exc:
            self._lost_database(request, exc, "changing the mail address of", refund)
            return None
        old = change.old_address or "(none)"
        told = f"Changed the customer mail address from {old} to {change.new_address}"
        self.log_change(request, _concrete(refund), f"{told}: {change.note}")
        self.message_user(
            request, f"{told}. Mails still waiting to be sent go there too.", messages.SUCCESS
        )
        return self._back_to(refund)

    def _refund_to_act_on(self, request: HttpRequest, object_id: str) -> Refund:
        """The refund of a mail page, for those who may act on its mails: 403 for anyone
        else before the refund is looked up (so no one learns which ids exist), 404 for
        an id that is no refund of this admin."""
        if not self.may_act_on_mails(request):
            raise PermissionDenied
        refund = self.get_object(request, unquote(object_id))
        if refund is None:
            raise Http404("No such refund.")
        assert isinstance(refund, Refund)  # this admin's model, or a proxy of it
        return refund

    def _own_url(self, page: str, refund: Refund) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{page}"
        return reverse(name, args=[quote(refund.pk)])

    def _back_to(self, refund: Refund) -> HttpResponseRedirect:
        return HttpResponseRedirect(self._own_url("change", refund))

    def _lost_database(
        self, request: HttpRequest, exc: DatabaseError, doing: str, refund: Refund
    ) -> None:
        if not connection_lost(exc):
            raise exc
        log.exception("database unavailable while %s refund %s", doing, refund.pk)
        drop_broken_connection()
        self.message_user(request, DATABASE_UNAVAILABLE, messages.ERROR)


def _actor(request: HttpRequest) -> str:
    """Who acts, as the services record it: `user:<username>` (admin_view lets in only
    staff who signed in)."""
    user = request.user
    assert isinstance(user, AbstractBaseUser)
    return actor_label(user)


def _concrete(refund: Refund) -> Refund:
    """The refund as its own model, not a queue's proxy: the admin log entry lands on the
    refund's history, whichever page the button was on."""
    return refund if type(refund) is Refund else Refund.objects.get(pk=refund.pk)
