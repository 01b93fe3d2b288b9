"""The Stripe API versions the back office speaks, and what differs between them.

Stripe dates its versions; a client pins one (a key's default, or `Stripe-Version` on a
request) and gets that version's shapes. Here one change matters: from 2022-11-15 on, a
charge no longer embeds its `refunds` (expand[]=refunds brings them). Every other shape is
the same in every version listed. A version not listed is refused (400), so a client
never gets a shape it did not ask for."""

from __future__ import annotations

# The oldest listed: what keys and webhook endpoints made before versions existed keep,
# so their clients see what they always saw.
LEGACY = "2020-08-27"
# The newest: new keys default to it (the official stripe package 16 sends it too).
LATEST = "2026-10-28.endive"
SUPPORTED = (
    LEGACY,
    "2022-08-01",
    "2022-11-15",
    "2023-10-16",
    "2024-06-20",
    "2025-03-31.basil",
    "2026-07-29.dahlia",
    LATEST,
)
# The first version whose charges do not embed their refunds.
REFUNDS_NOT_EMBEDDED_FROM = "2022-11-15"


def is_supported(version: object) -> bool:
    return isinstance(version, str) and version in SUPPORTED


def embeds_refunds(version: str) -> bool:
    """Whether a charge shown in this version carries its `refunds` unasked."""
    return version[:10] < REFUNDS_NOT_EMBEDDED_FROM


def unsupported_message(version: str) -> str:
    shown = version[:40]
    return (
        f"Invalid Stripe API version: {shown!r}. This server speaks {', '.join(SUPPORTED)}; "
        "send one of them in Stripe-Version, or none for your key's default."
    )
