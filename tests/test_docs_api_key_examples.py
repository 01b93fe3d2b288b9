"""No example sends an API key as a user name (issue 44, finding 11): `curl -u sk_...:` puts
the key in HTTP Basic's user name, which access logs and proxies write down. The docs, the
deploy files, the scripts and what the commands print show
`-H "Authorization: Bearer sk_..."` instead."""

from __future__ import annotations

import re

from tests.processes import ROOT

# curl's -u/--user (also -usk_..., --user=...) followed by a key or a variable holding one.
KEY_AS_USER = re.compile(r"""(?<![\w-])(?:-u|--user)(?:\s+|=)?["']?(?:sk_|rk_|\$)""")

WHERE = ("README.md", "Makefile", "docs", "deploy", "scripts", "ledger_app/management/commands")


def shipped_text_files():
    for name in WHERE:
        path = ROOT / name
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                try:
                    yield file, file.read_text()
                except UnicodeDecodeError:
                    continue


def test_no_example_sends_an_api_key_as_a_basic_user_name():
    found = [
        f"{file.relative_to(ROOT)}:{number}: {line.strip()}"
        for file, text in shipped_text_files()
        for number, line in enumerate(text.splitlines(), 1)
        if KEY_AS_USER.search(line)
    ]
    assert found == [], "\n".join(found)


def test_the_pattern_finds_the_forms_it_is_for():
    for shown in (
        "curl -u sk_...: http://127.0.0.1:8000/v1/refunds",
        'curl -u "$KEY": https://refunds.example.com/v1/charges',
        "curl --user sk_test_x: http://h/",
        "curl --user=$STRIPE_KEY: http://h/",
        "curl -usk_abc: http://h/",
    ):
        assert KEY_AS_USER.search(shown), shown
    for fine in (
        'curl -H "Authorization: Bearer sk_..." http://127.0.0.1:8000/v1/refunds',
        "make run -u nothing",
        "pg_dump -U postgres",
        "sort -u file",
    ):
        assert not KEY_AS_USER.search(fine), fine
