"""Demo data for `make run`: a few charges in several currencies and an admin login."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.test.utils import override_settings
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from ledger_app.access.api_keys import create_api_key
from ledger_app.access.models import ApiKey
from ledger_app.access.second_factor import enrol_totp, enrolment_instructions
from ledger_app.approvals.models import RefundLimit
from ledger_app.charges.models import Charge
from ledger_app.charges.services import record_charge
from ledger_app.counts import count_of
from ledger_app.idempotency.services import DEMO_KEYS
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund

ADMIN_USERNAME = "admin"
QUEUED_CHARGE = "ch_demoUsdQueued0000000014"
DEMO_KEY_NAME = "demo"


def _customer_language(currency: str) -> dict[str, str]:
    """The euro charges' customers read German: their mails show the second language."""
    return {"locale": "de"} if currency == "eur" else {}


# (charge id, amount in minor units, currency, status, description, refunds to issue,
#  metadata). The simulated provider misbehaves on charges whose metadata asks it to.
DEMO_CHARGES: list[tuple[str, int, str, str, str, list[int | None], dict[str, str]]] = [
    ("ch_demoUsdUnrefunded000001", 1234, "usd", "succeeded", "Coffee subscription", [], {}),
    ("ch_demoUsdPartial000000002", 5000, "usd", "succeeded", "Headphones", [1500], {}),
    ("ch_demoUsdFull000000000003", 2599, "usd", "succeeded", "Concert ticket", [None], {}),
    ("ch_demoEurPartial000000004", 4200, "eur", "succeeded", "Train pass", [1000], {}),
    ("ch_demoEurUnrefunded000005", 999, "eur", "succeeded", "E-book", [], {}),
    ("ch_demoJpyFull000000000006", 1500, "jpy", "succeeded", "Bento box", [None], {}),
    ("ch_demoJpyPartial000000007", 30000, "jpy", "succeeded", "Hotel night", [5000, 2500], {}),
    ("ch_demoKwdUnrefunded000008", 12345, "kwd", "succeeded", "Desert tour", [], {}),
    ("ch_demoUsdPending000000009", 700, "usd", "pending", "Awaiting capture", [], {}),
    ("ch_demoUsdFailed0000000010", 800, "usd", "failed", "Card declined", [], {}),
    (
        "ch_demoUsdDeclines00000011",
        4500,
        "usd",
        "succeeded",
        "Provider declines refunds",
        [1000],  # declined: in the needs-attention queue until marked handled
        {"simulate_refund": "decline"},
    ),
    (
        "ch_demoUsdTimesOut00000012",
        3900,
        "usd",
        "succeeded",
        "Provider times out",
        [1200],  # unknown: in the queue; the reconciler keeps asking
        {"simulate_refund": "timeout"},
    ),
    ("ch_demoUsdQueued0000000014", 2000, "usd", "succeeded", "Refund nobody sent", [], {}),
    (
        "ch_demoEurLostReply0000013",
        6100,
        "eur",
        "succeeded",
        "Provider applies, reply lost",
        [],
        {"simulate_refund": "apply_then_timeout"},
    ),
    # Refund these, then run `manage.py advance_simulated_provider`: the provider's news
    # arrives as webhooks (pending -> succeeded; succeeded -> failed, amount released).
    (
        "ch_demoUsdPendsLater000015",
        2500,
        "usd",
        "succeeded",
        "Provider settles refunds later",
        [],
        {"simulate_refund": "pending_then_succeed"},
    ),
    (
        "ch_demoUsdFailsLater000016",
        2700,
        "usd",
        "succeeded",
        "Provider fails refunds later",
        [],
        {"simulate_refund": "succeed_then_fail"},
    ),
    ("ch_demoUsdNeedsLead00000017", 90000, "usd", "succeeded", "Laptop (big refund)", [], {}),
]
# Support agents may refund up to $100 at a time and $300 a day (USD) in the demo; above
# that a lead approves. Ana, an agent, asked for one such refund: it waits in the queue.
AGENT_LIMITS = {"currency": "usd", "per_refund": 10_000, "per_day": 30_000}
WAITING_CHARGE = "ch_demoUsdNeedsLead00000017"
DEMO_AGENT = "ana"

# A month of settled refunds behind the home page's chart: 0 to 3 a day over the last 29
# days, each on a charge of its own, in a fixed pattern (the same on every machine).
RBC = Refund.Reason.REQUESTED_BY_CUSTOMER
HISTORY_REASONS: list[str | None] = [
    RBC,
    RBC,
    Refund.Reason.DUPLICATE,
    None,
    RBC,
    Refund.Reason.FRAUDULENT,
]
HISTORY_CURRENCIES = ["usd", "usd", "eur", "jpy", "usd"]


def history_rows() -> list[tuple[str, int, int, str, str | None, bool]]:
    """(charge id, days ago, amount, currency, reason, refunded in full) for the history."""
    rows: list[tuple[str, int, int, str, str | None, bool]] = []
    for days_ago in range(1, 30):
        for n in range(days_ago * 7 % 4):
            i = len(rows)
            rows.append(
                (
                    f"ch_demoHistory{days_ago:02d}{n}0000000000",
                    days_ago,
                    500 + (days_ago * 131 + n * 57) % 4_500,
                    HISTORY_CURRENCIES[i % len(HISTORY_CURRENCIES)],
                    HISTORY_REASONS[i % len(HISTORY_REASONS)],
                    i % 3 != 2,
                )
            )
    return rows


def charges_said(created: int) -> str:
    """What this run made and what there is: the demo's charges made now, those an earlier
    run made, and every charge in the database (the admin's list shows them all)."""
    already = len(DEMO_CHARGES) + len(history_rows()) - created
    there = f" ({count_of(already, 'demo charge')} already there)" if already else ""
    return (
        f"Demo data: {count_of(created, 'charge')} created{there}; "
        f"{count_of(Charge.objects.count(), 'charge')} in the database."
    )


class Command(BaseCommand):
    help = "Load demo charges and refunds once, and create the admin user (safe to re-run)."

    def handle(self, *args: Any, **options: Any) -> None:
        created = self._demo_charges()
        self._stale_pending_refund()
        self._refund_awaiting_approval()
        created += self._month_of_history()
        self.stdout.write(charges_said(created))
        self.stdout.write(
            f"The {len(DEMO_CHARGES)} that show each case (the other {len(history_rows())} "
            "are a month of settled refunds for the home page's chart):"
        )
        for charge in Charge.objects.filter(pk__in=[row[0] for row in DEMO_CHARGES]):
            self.stdout.write(
                f"  {charge.id}  {charge.status:<9}  "
                f"{format_money(charge.amount, charge.currency):>12} charged, "
                f"{format_money(charge.amount_refunded, charge.currency):>12} refunded"
            )
        self._ensure_admin()
        self._ensure_api_key()
        self._second_factor_notice()

    def _demo_charges(self) -> int:
        """The charges that show each case, each with its refunds; the charges it made."""
        created = 0
        for charge_id, amount, currency, status, description, refunds, extra in DEMO_CHARGES:
            if not Charge.objects.filter(pk=charge_id).exists():
                record_charge(
                    charge_id=charge_id,
                    amount=amount,
                    currency=currency,
                    status=status,
                    description=description,
                    customer=f"cus_demo_{charge_id[-2:]}",
                    metadata={"demo": "true", **_customer_language(currency), **extra},
                    actor="seed_demo",
                    # their refunds' customer mails go to the demo's SMTP sink (make run)
                    receipt_email=f"customer{charge_id[-2:]}@example.com",
                    card_last4="4242",
                )
                created += 1
            for number, refund_amount in enumerate(refunds, start=1):
                # Keyed, so a re-run replays these instead of refunding again.
                create_refund(
                    RefundRequest(
                        charge_id=charge_id,
                        amount=refund_amount,
                        idempotency_key=f"{DEMO_KEYS}:{charge_id}:{number}",
                        reason=Refund.Reason.REQUESTED_BY_CUSTOMER,
                        actor="seed_demo",
                        source=Refund.Source.CLI,
                    )
                )
        return created

    def _refund_awaiting_approval(self) -> None:
        """The agents' demo limits, and one refund over them that a lead (the admin) can
        approve or reject under "Refunds awaiting approval"."""
        # Made by migration 0006 (get_or_create: a test that flushed the tables has none).
        agents, _ = Group.objects.get_or_create(name="Support agents")
        RefundLimit.objects.get_or_create(group=agents, currency="usd", defaults=AGENT_LIMITS)
        ana, made = get_user_model().objects.get_or_create(
            username=DEMO_AGENT, defaults={"is_staff": True}
        )
        if made:
            ana.set_unusable_password()  # a requester for the demo; she does not sign in
            ana.save()
            ana.groups.add(agents)
        create_refund(
            RefundRequest(
                charge_id=WAITING_CHARGE,
                amount=45_000,
                idempotency_key=f"{DEMO_KEYS}:{WAITING_CHARGE}:1",
                reason=Refund.Reason.REQUESTED_BY_CUSTOMER,
                note="Customer returned the laptop unopened.",
                actor=ana,
                source=Refund.Source.ADMIN,
            )
        )

    def _month_of_history(self) -> int:
        """Charges and refunds dated over the last month, so the home page's chart has a
        month to show. Made through the services like the rest; only their dates are made
        up (the ledger entries keep the moment they were written). The charges it made."""
        now = timezone.now()
        created = 0
        for charge_id, days_ago, amount, currency, reason, in_full in history_rows():
            charged_at = now - timedelta(days=days_ago, hours=3 + days_ago % 5)
            if not Charge.objects.filter(pk=charge_id).exists():
                record_charge(
                    charge_id=charge_id,
                    amount=amount,
                    currency=currency,
                    description="Demo order",
                    customer=f"cus_demo_h{days_ago:02d}",
                    metadata={"demo": "true"},
                    created_at=charged_at,
                    actor="seed_demo",
                )
                created += 1
            result = create_refund(
                RefundRequest(
                    charge_id=charge_id,
                    amount=None if in_full else amount // 2,
                    idempotency_key=f"{DEMO_KEYS}:{charge_id}:1",
                    reason=reason,
                    actor="seed_demo",
                    source=Refund.Source.CLI,
                )
            )
            if not result.replayed:
                Refund.objects.filter(pk=result.item.pk).update(
                    created_at=charged_at + timedelta(hours=2)
                )
        return created

    def _stale_pending_refund(self) -> None:
        """A refund queued for the worker an hour ago that no worker sent: the third kind
        the needs-attention queue shows (with unknown and declined ones)."""
        with override_settings(REFUND_DISPATCH="worker"):
            result = create_refund(
                RefundRequest(
                    charge_id=QUEUED_CHARGE,
                    amount=500,
                    idempotency_key=f"{DEMO_KEYS}:{QUEUED_CHARGE}:1",
                    reason=Refund.Reason.DUPLICATE,
                    actor="seed_demo",
                    source=Refund.Source.CLI,
                )
            )
        if not result.replayed:
            # Only its age is made up; it was reserved through the service like any other.
            Refund.objects.filter(pk=result.item.pk).update(
                created_at=timezone.now() - timedelta(hours=1)
            )

    def _ensure_admin(self) -> None:
        users = get_user_model()
        if users.objects.filter(username=ADMIN_USERNAME).exists():
            self.stdout.write(
                f"Admin login: {ADMIN_USERNAME} (its password was printed when it was created; "
                f"`python manage.py changepassword {ADMIN_USERNAME}` sets a new one)."
            )
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(ADMIN_USERNAME, "admin@example.com", password)
        self.stdout.write(
            self.style.SUCCESS(f"Admin login: {ADMIN_USERNAME} / {password}  (shown this once)")
        )

    def _second_factor_notice(self) -> None:
        """The demo may run without the admin's second factor, and says so; with it on, the
        admin gets an authenticator the first time."""
        if not settings.ADMIN_OTP_REQUIRED:
            self.stdout.write(
                self.style.WARNING(
                    "WARNING: the admin's second factor is OFF for this demo "
                    "(ADMIN_OTP_REQUIRED=false): refunds need only a password here. "
                    "Production refuses to start like this; `ADMIN_OTP_REQUIRED=true make "
                    "run` turns it on."
                )
            )
            return
        admin = get_user_model().objects.get(username=ADMIN_USERNAME)
        if TOTPDevice.objects.filter(user=admin, confirmed=True).exists():
            self.stdout.write(
                f"Second factor: {ADMIN_USERNAME} has an authenticator (`python manage.py "
                f"enrol_second_factor {ADMIN_USERNAME}` replaces it)."
            )
            return
        self.stdout.write(enrolment_instructions(enrol_totp(admin)))

    def _ensure_api_key(self) -> None:
        existing = ApiKey.objects.filter(name=DEMO_KEY_NAME, revoked_at__isnull=True).first()
        if existing is not None:
            self.stdout.write(
                f"Demo API key: {existing.prefix}... (its secret was printed when it was "
                "created; `python manage.py create_api_key NAME` makes another)."
            )
            return
        _, secret = create_api_key(name=DEMO_KEY_NAME)
        self.stdout.write(self.style.SUCCESS(f"Demo API key: {secret}  (shown this once)"))
