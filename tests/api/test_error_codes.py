"""Stripe's error codes wherever Stripe has one for the case; ours only where it has none,
each in docs/api.md's table. The codes come from the code itself (tests/api/error_codes.py),
so a code added anywhere in the API or the domain is checked here."""

from __future__ import annotations

from tests.api import error_codes


def test_the_reading_finds_the_codes_of_every_source():
    sent = error_codes.sent_codes()
    # one from each source the reading walks: a domain error, a refuse() in fields.py, a
    # code= in params.py, DRF's table, Django's table
    assert {"charge_disputed", "parameter_invalid_integer", "parameters_exclusive"} <= sent
    assert {"rate_limit", "body_too_large"} <= sent
    # the domain's finer codes are rendered as Stripe's
    assert not {"invalid_reason", "invalid_metadata", "note_required"} & sent


def test_every_code_sent_is_stripes_or_documented_as_ours():
    sent = error_codes.sent_codes()
    ours = set(error_codes.documented_own_codes())
    undocumented = sent - error_codes.STRIPE_CODES - ours
    assert not undocumented, f"neither Stripe's nor in docs/api.md: {sorted(undocumented)}"


def test_the_table_of_our_own_lists_only_codes_that_are_sent_and_not_stripes():
    sent = error_codes.sent_codes()
    ours = set(error_codes.documented_own_codes())
    assert ours, "docs/api.md has no table of our own codes"
    assert not ours - sent, f"documented but never sent: {sorted(ours - sent)}"
    stripes = ours & error_codes.STRIPE_CODES
    assert not stripes, f"Stripe's own: {sorted(stripes)}"


def test_the_docs_name_every_stripe_code_we_send():
    stripe_sent = error_codes.sent_codes() & error_codes.STRIPE_CODES
    section = error_codes.DOCS.read_text().split("### Error codes\n", 1)[1]
    section = section.split("### Error codes of our own", 1)[0]
    assert not {code for code in stripe_sent if f"`{code}`" not in section}
