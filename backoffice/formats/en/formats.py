"""How the admin writes dates and times (English, which en-us falls back to): the ISO order
and a 24-hour clock, and every time labelled with its zone ("2026-11-30 14:23 EST"), because
each person reads them in their own zone (ledger_app/access/time_zones.py). Formats not
named here are Django's own for English."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = DATE_FORMAT
# A time of day of a moment, with its zone: a table that must wrap a moment wraps it between
# DATE_FORMAT and this (templates/admin/ledger_app/charge/refund_history.html).
TIME_FORMAT = "H:i T"
DATETIME_FORMAT = f"{DATE_FORMAT} {TIME_FORMAT}"
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
