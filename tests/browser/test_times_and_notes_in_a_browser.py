"""The charge page at 1280 px, as a support agent reads it: times in the zone they chose (from
the user links), labelled with it, and every refund's note whole, wrapped, not cut off."""

from __future__ import annotations

from datetime import UTC, datetime

from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.browser.admin_pages import at_charge_page, change_url, new_charge
from tests.browser.chromium import DESKTOP

KNOWN = datetime(2026, 11, 30, 19, 23, tzinfo=UTC)
LONG_NOTE = (
    "Customer called twice about the duplicate charge; refunded after checking the order "
    "history, the courier's proof of non-delivery and the bank statement they sent (ticket "
    "SUP-123456). Follow up next week if the bank has not credited it."
)
LINK_NOTE = "https://support.example.com/tickets/SUP-1234567890/attachments/bank-statement.pdf"


def refunds_with_long_notes():
    """A charge with refunds whose columns are as wide as real ones get: long notes, a link
    without spaces, the longest reason and long requester names."""
    charge = new_charge(amount=50_000)
    create_refund(
        RefundRequest(
            charge_id=charge.pk,
            amount=1_000,
            note=LONG_NOTE,
            reason=Refund.Reason.REQUESTED_BY_CUSTOMER,
            actor="user:maximiliane.vandenberghe",
        )
    )
    create_refund(
        RefundRequest(
            charge_id=charge.pk, amount=2_000, note=LINK_NOTE, actor="api_key:sk_AbC12345"
        )
    )
    Refund.objects.filter(charge=charge).update(created_at=KNOWN)  # only their age made up
    return charge


def note_cells(page) -> list[dict]:
    """Where each note of the refund history sits, and whether its table scrolls."""
    return page.evaluate(
        """() => Array.from(
            document.querySelectorAll('.field-refund_history td.note'), (cell) => {
                const box = cell.getBoundingClientRect();
                const table = cell.closest('.history-table');
                return {
                    text: cell.innerText, left: box.left, right: box.right, height: box.height,
                    lineHeight: parseFloat(getComputedStyle(cell).lineHeight),
                    clipped: cell.scrollWidth > cell.clientWidth,
                    tableScrolls: table.scrollWidth > table.clientWidth,
                };
            })"""
    )


def test_an_agent_sets_their_zone_and_reads_whole_notes_at_1280_px(agent_page, screenshot):
    page = agent_page
    charge = refunds_with_long_notes()
    page.goto(change_url(charge))
    assert page.text_content(".time-zone-link") == "Time zone: UTC"
    assert "2026-11-30 19:23 UTC" in page.inner_text(".field-refund_history")

    page.click(".time-zone-link")
    page.select_option("#id_time_zone", "America/New_York")
    page.click("#time-zone-form input[type=submit]")

    page.wait_for_url(at_charge_page(charge))
    screenshot(page, "charge-page-new-york-1280")
    assert page.viewport_size == DESKTOP
    assert page.inner_text(".messagelist .success").startswith(
        "Times are now shown in America/New_York: it is "
    )
    assert page.text_content(".time-zone-link") == "Time zone: America/New_York"
    whens = page.locator(".field-refund_history td.when").all_inner_texts()
    assert [" ".join(w.split()) for w in whens] == ["2026-11-30 14:23 EST"] * 2
    notes = note_cells(page)
    assert sorted(n["text"] for n in notes) == sorted([LONG_NOTE, LINK_NOTE])
    for note in notes:
        assert not note["tableScrolls"] and not note["clipped"], note
        assert 0 <= note["left"] < note["right"] <= DESKTOP["width"], note
        assert note["height"] > 2 * note["lineHeight"], note  # wrapped, over several lines
