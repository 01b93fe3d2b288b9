"""The README and docs/ name only what exists: every file and folder, every function or class
(`path.py:name`, `package.module.name()`, `Class.attribute`), every `manage.py` command and
`make` target, and every setting or environment variable they name is in the checkout
(tests/doc_names.py says how each is found and checked). A rename that leaves a page behind
fails here, with the page, the line and the name."""

import pytest

from tests.doc_names import OUTSIDE, everything_named_that_is_missing, names_on

pytestmark = pytest.mark.any_database


def test_the_docs_name_only_what_exists():
    missing = everything_named_that_is_missing()
    assert not missing, "the docs name what the checkout does not have:\n" + "\n".join(
        map(str, missing)
    )


PLANTED = """\
# A page that has drifted

The write path is `ledger_app/refunds/services.py:create_refund`; its checks were in
`ledger_app/refunds/services.py:refund_everything`, then in `ledger_app/refunds/gone.py`,
and the old `selectors/drift.py`. `ledger_app.ledger.drift.find_ledger_drift()` still
runs; `ledger_app.ledger.drift.find_ledger_sins()` does not. `Charge.refund_blocker` is
there, `Charge.refund_anything` is not, nor is `reserve_and_write()`. See
`tests/test_docs_name_what_exists.py::test_the_check_reports_each_kind_of_missing_name`
and `tests/test_docs_name_what_exists.py::test_nothing_like_this`.

Run `python manage.py verify_ledger`, then `manage.py verify_the_books`, or `make test`
and `make everything`. Set `REFUND_DISPATCH=worker`, `ADMIN_TIME_ZONE` or
`REFUND_TELEPATHY_MODE`; `settings.NO_SUCH_SETTING` is not one.

```sh
.venv/bin/python manage.py refund_all_of_it
ls ledger_app/services/
```

A command in a span: `python tests/bench/gone.py --only admin`.
"""


def test_the_check_reports_each_kind_of_missing_name():
    found = {(f.line, f.what, f.why) for f in names_on("docs/planted.md", PLANTED)}

    assert found == {
        (
            4,
            "ledger_app/refunds/services.py:refund_everything",
            "is not defined in ledger_app/refunds/services.py",
        ),
        (4, "ledger_app/refunds/gone.py", "names a path that does not exist"),
        (5, "selectors/drift.py", "names a path that does not exist"),
        (
            6,
            "ledger_app.ledger.drift.find_ledger_sins()",
            "is not defined in "
            "ledger_app/ledger/drift.py, nor is it a logger, check id or permission",
        ),
        (7, "Charge.refund_anything", "is not an attribute of Charge"),
        (7, "reserve_and_write()", "is not a function the code defines"),
        (
            9,
            "tests/test_docs_name_what_exists.py::test_nothing_like_this",
            "is not defined in tests/test_docs_name_what_exists.py",
        ),
        (11, "manage.py verify_the_books", "is not a management command"),
        (12, "make everything", "is not a target of the Makefile"),
        (
            13,
            "REFUND_TELEPATHY_MODE",
            "is neither read from the environment nor a setting or constant of the code",
        ),
        (13, "settings.NO_SUCH_SETTING", "is not a setting"),
        (16, "manage.py refund_all_of_it", "is not a management command"),
        (17, "ledger_app/services/", "names a path that does not exist"),
        (20, "tests/bench/gone.py", "names a path that does not exist"),
    }


def test_the_configuration_table_names_only_what_the_code_reads():
    table = (
        "| variable | default | meaning |\n|---|---|---|\n"
        "| `REFUND_DISPATCH` | `inline` | read |\n"
        "| `OPEN_STATUSES`, `LEDGER_TEA_TIME` | none | a constant, and nothing |\n"
    )
    found = {(f.line, f.what) for f in names_on("docs/operating/configuration.md", table)}

    assert found == {(4, "OPEN_STATUSES"), (4, "LEDGER_TEA_TIME")}


def test_every_name_allowed_from_outside_the_checkout_says_why():
    assert all(len(reason) > 10 for reason in OUTSIDE.values())
