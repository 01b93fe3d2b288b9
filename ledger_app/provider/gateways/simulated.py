"""A payment provider simulated in this database, with deterministic misbehaviour.

It behaves like a real provider: one object per idempotency key, the same key with the
same parameters returns the first answer, the same key with other parameters is an error.
Behaviours come from metadata, for demos and tests:
- the charge's `simulate_refund`: succeed (default), decline, timeout (nothing applied,
  the caller times out), apply_then_timeout (applied, the answer is lost), slow (answers
  after SIMULATED_GATEWAY_LATENCY_MS; past the caller's timeout it applies and times out),
  pending_then_succeed (accepted as pending; it succeeds later), succeed_then_fail
  (succeeds; it fails later, as a refund to a closed card does). "Later" is when
  `manage.py advance_simulated_provider` runs: it settles them and sends the news as
  Stripe-shaped events through the inbound webhook path;
- the charge request's `simulate_charge`: the same values, for captures; and its
  `source`, when it is one of Stripe's test tokens that decline (tok_chargeDeclined,
  tok_chargeDeclinedInsufficientFunds, ...: simulated_provider/decline_tokens.py), is
  declined with that token's decline code;
- the charge's `simulate_lookup`: answer (default) or unavailable (lookups cannot say);
- the charge's `simulate_books`: a fault in its refunds' balance transactions
  (simulated_provider/books.py: refund_other_amount, refund_dropped).
A succeeded refund's answer carries its card network reference (ARN) once the simulated
card network has given it, SIMULATED_ARN_DELAY_SECONDS after the refund was made
(simulated_provider/card_network.py): so a lookup after that has it, the first answer not.
A real provider knows its own charges; this one reads the charge's metadata from the ledger.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime
from typing import Any, Unpack

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from ledger_app.charges.models import Charge
from ledger_app.db import release_connection
from ledger_app.ids import new_id
from ledger_app.provider.gateways.base import (
    ChargeLookupParams,
    ChargeParams,
    Gateway,
    GatewayTimeout,
    GatewayUnavailable,
    IdempotencyKeyConflict,
    Listed,
    OutcomeUnknown,
    ProviderAnswer,
    RefundLookupParams,
    RefundParams,
    Verdict,
)
from simulated_provider import books
from simulated_provider.card_network import acquirer_reference
from simulated_provider.decline_tokens import decline_code
from simulated_provider.models import (
    ProviderBalanceTransaction,
    ProviderCharge,
    ProviderDispute,
    ProviderPayout,
    ProviderRefund,
    ProviderRequest,
)
from simulated_provider.objects import (
    balance_transaction_object,
    charge_object,
    dispute_object,
    payout_object,
    refund_object,
)

Status = ProviderRefund.Status

BEHAVIOURS = {
    "succeed",
    "decline",
    "timeout",
    "apply_then_timeout",
    "slow",
    "pending_then_succeed",
    "succeed_then_fail",
}


# The provider's two kinds of record, each kept once per idempotency key.
Provided = type[ProviderRefund] | type[ProviderCharge]


class SimulatedGateway(Gateway):
    def refund(self, **request: Unpack[RefundParams]) -> ProviderAnswer:
        charge_reference = request["charge_reference"]
        metadata = _charge_metadata(charge_reference)
        behaviour = metadata.get("simulate_refund", "succeed")
        record = self._apply(
            ProviderRefund,
            "refund",
            request["provider_key"],
            behaviour,
            request["timeout"],
            params={
                "charge": charge_reference,
                "amount": request["amount"],
                "currency": request["currency"],
                "metadata": request["metadata"],
            },
            charge_reference=charge_reference,
            books_fault=str(metadata.get("simulate_books", "")),
        )
        return _answer(record)

    def lookup_refund(self, **request: Unpack[RefundLookupParams]) -> ProviderAnswer | None:
        key, reference = request["provider_key"], request["charge_reference"]
        return _lookup(ProviderRefund, "refund_lookup", key, reference)

    def charge(self, **request: Unpack[ChargeParams]) -> ProviderAnswer:
        metadata, description = request["metadata"], request["description"]
        behaviour = metadata.get("simulate_charge", "succeed")
        declined = decline_code(metadata.get("source"))  # Stripe's test tokens that decline
        if declined is not None:
            behaviour = "decline"
        record = self._apply(
            ProviderCharge,
            "charge",
            request["provider_key"],
            behaviour,
            request["timeout"],
            params={
                "amount": request["amount"],
                "currency": request["currency"],
                "description": description,
                "metadata": metadata,
            },
            description=description,
            **({"decline_reason": declined} if declined else {}),
        )
        return _answer(record)

    def lookup_charge(self, **request: Unpack[ChargeLookupParams]) -> ProviderAnswer | None:
        key, ledger_charge_id = request["provider_key"], request["ledger_charge_id"]
        return _lookup(ProviderCharge, "charge_lookup", key, ledger_charge_id)

    def list_created(self, kind: Listed, *, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """Its objects of `kind` made in [start, end). Its payouts are made, as due, first
        (simulated_provider/books.py)."""
        window = {"created_at__gte": start, "created_at__lt": end}
        if kind == "refund":
            return [refund_object(r) for r in ProviderRefund.objects.filter(**window)]
        if kind == "charge":
            return [charge_object(c) for c in ProviderCharge.objects.filter(**window)]
        if kind == "dispute":
            return [dispute_object(d) for d in ProviderDispute.objects.filter(**window)]
        books.pay_out()
        if kind == "balance_transaction":
            moves = ProviderBalanceTransaction.objects.filter(**window)
            return [balance_transaction_object(bt) for bt in moves]
        paid = ProviderPayout.objects.filter(**window)
        return [payout_object(p, _payout_transaction(p.provider_id)) for p in paid]

    def list_paid_out(self, payout_id: str) -> list[dict[str, Any]]:
        moves = ProviderBalanceTransaction.objects.filter(payout__provider_id=payout_id)
        return [balance_transaction_object(bt) for bt in moves]

    def _apply(
        self,
        model: Provided,
        operation: str,
        key: str,
        behaviour: str,
        timeout: float,
        *,
        params: dict[str, Any],
        **fields: str,
    ) -> ProviderRefund | ProviderCharge:
        late = _before_applying(operation, key, behaviour, timeout)
        canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
        fingerprint = hashlib.sha256(canonical.encode()).hexdigest()
        record = _record(
            model,
            key=key,
            fingerprint=fingerprint,
            behaviour=behaviour,
            params=params,
            fields=fields,
        )
        if record.fingerprint != fingerprint:
            _log(operation, key, behaviour, "key_conflict")
            raise IdempotencyKeyConflict(
                f"simulated provider: key {key} was first used with other parameters"
            )
        if behaviour == "apply_then_timeout" or late:
            _log(operation, key, behaviour, "applied_then_timed_out")
            raise GatewayTimeout("simulated provider: applied, but the answer was lost")
        _log(operation, key, behaviour, record.status)
        return record


def _before_applying(operation: str, key: str, behaviour: str, timeout: float) -> bool:
    """What the behaviour does before anything is applied: an unknown one is unavailable,
    a timeout applies nothing, a slow one waits its latency (at most `timeout`). Whether
    the answer then comes too late."""
    if behaviour not in BEHAVIOURS:
        _log(operation, key, behaviour, "unavailable")
        raise GatewayUnavailable(f"simulated provider: unknown behaviour {behaviour!r}")
    if behaviour == "timeout":
        _log(operation, key, behaviour, "timed_out")
        raise GatewayTimeout("simulated provider: no answer, nothing applied")
    if behaviour != "slow":
        return False
    latency = settings.SIMULATED_GATEWAY_LATENCY_MS / 1000
    release_connection()  # a real provider's wait holds none of our connections
    time.sleep(min(latency, timeout))
    return latency > timeout


def _record(
    model: Provided,
    *,
    key: str,
    fingerprint: str,
    behaviour: str,
    params: dict[str, Any],
    fields: dict[str, str],
) -> ProviderRefund | ProviderCharge:
    """What the provider applies under this key: made once; the same key again finds it."""
    status = {"decline": Status.DECLINED, "pending_then_succeed": Status.PENDING}
    reason = fields.pop("decline_reason", "simulated_decline")
    fault = fields.pop("books_fault", "")
    try:
        with transaction.atomic():
            record = model.objects.create(
                provider_id=new_id("sim_re_" if model is ProviderRefund else "sim_ch_"),
                idempotency_key=key,
                fingerprint=fingerprint,
                amount=params["amount"],
                currency=params["currency"],
                status=status.get(behaviour, Status.SUCCEEDED),
                decline_reason=reason if behaviour == "decline" else "",
                metadata=params["metadata"],
                **fields,
            )
            _book(record, fault)
            return record
    except IntegrityError:
        return model.objects.get(idempotency_key=key)


def _book(record: ProviderRefund | ProviderCharge, fault: str) -> None:
    """What the request moved in the provider's balance: a charge that succeeded; a
    refund accepted, pending or not (its money leaves when it is made)."""
    if record.status == Status.DECLINED:
        return
    if isinstance(record, ProviderRefund):
        books.book_refund(record, fault)
    elif record.status == Status.SUCCEEDED:
        books.book_charge(record)


def _answer(record: ProviderRefund | ProviderCharge) -> ProviderAnswer:
    """The record as the provider's word; one still pending is no answer yet."""
    if record.status == Status.PENDING:
        raise OutcomeUnknown(f"simulated provider: {record.provider_id} is still pending")
    verdict: Verdict = "succeeded" if record.status == Status.SUCCEEDED else "declined"
    reference = acquirer_reference(record) if isinstance(record, ProviderRefund) else ""
    return ProviderAnswer(verdict, record.provider_id, record.decline_reason, reference)


def _lookup(
    model: Provided, operation: str, key: str, charge_reference: str
) -> ProviderAnswer | None:
    """The provider's record under that key, None when it has none; the charge's
    `simulate_lookup` can make the lookup slow or unavailable."""
    _lookup_allowed(_charge_metadata(charge_reference), key, operation)
    record = model.objects.filter(idempotency_key=key).first()
    _log(operation, key, "answer", "found" if record else "not_found")
    return None if record is None else _answer(record)


def _payout_transaction(payout_id: str) -> str | None:
    found = ProviderBalanceTransaction.objects.filter(type="payout", source=payout_id)
    return found.values_list("provider_id", flat=True).first()


def _charge_metadata(reference: str) -> dict[str, Any]:
    metadata = (
        Charge.objects.filter(Q(pk=reference) | Q(provider_charge_id=reference))
        .values_list("metadata", flat=True)
        .first()
    )
    return metadata or {}


def _lookup_allowed(metadata: dict[str, Any], key: str, operation: str) -> None:
    if metadata.get("simulate_lookup") == "slow":  # a lookup that takes the latency too
        time.sleep(settings.SIMULATED_GATEWAY_LATENCY_MS / 1000)
    if metadata.get("simulate_lookup") == "unavailable":
        _log(operation, key, "unavailable", "unavailable")
        raise GatewayUnavailable("simulated provider: lookups are unavailable")


def _log(operation: str, key: str, behaviour: str, outcome: str) -> None:
    ProviderRequest.objects.create(
        operation=operation, idempotency_key=key, behaviour=behaviour, outcome=outcome
    )
