"""Whether customer mails can be sent as configured: production needs the https://
address their status page links start with (`check --deploy`: ledger_app.W270; the
sender refuses to start without it)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

CHECK_ID = "ledger_app.W270"


def links_unusable() -> str | None:
    """Why the mails' links would not work here, or None when they would."""
    address = settings.REFUND_STATUS_BASE_URL
    if not address:
        return "REFUND_STATUS_BASE_URL is not set"
    if not settings.DEBUG and not address.startswith("https://"):
        return f"REFUND_STATUS_BASE_URL is {address}, not an https:// address"
    return None


@checks.register(checks.Tags.security, deploy=True)
def check_status_links(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    why = links_unusable() if settings.REFUND_EMAILS else None
    if why is None:
        return []
    return [
        checks.Warning(
            f"{why}: customer mails are written but send_customer_mails sends none.",
            hint="Set REFUND_STATUS_BASE_URL to the https:// address customers reach the back "
            "office at, or REFUND_EMAILS=off (docs/customer-mails.md).",
            id=CHECK_ID,
        )
    ]
