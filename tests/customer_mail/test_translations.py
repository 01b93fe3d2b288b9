"""The customer mails' and status page's translations (locale/, `make messages`): every
string of their templates is in each language's django.po, translated, with the same
placeholders, and the committed django.mo is that django.po compiled."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_python
from babel.messages.mofile import read_mo
from babel.messages.pofile import read_po
from django.conf import settings
from django.utils.translation.template import templatize

ROOT = Path(settings.BASE_DIR)
TEMPLATES = sorted(
    [
        *(ROOT / "templates" / "customer_mail").iterdir(),
        *(ROOT / "templates" / "status_page").iterdir(),
    ]
)
PYTHON = [ROOT / "ledger_app" / "customer_mail" / "messages.py"]
PLACEHOLDER = re.compile(r"%\((\w+)\)s")
LANGUAGES = [code for code, _ in settings.LANGUAGES[1:]]
KEYWORDS = ("gettext", "_", "pgettext", "ngettext")


def template_strings() -> set[str]:
    """What makemessages would gather: each template as Django hands it to xgettext
    (templatize), read by Babel's Python extractor; and messages.py's gettext calls."""
    found: set[str] = set()
    sources = [templatize(path.read_text(), origin=str(path)) for path in TEMPLATES]
    sources += [path.read_text() for path in PYTHON]
    for source in sources:
        for _, _, message, _ in extract_python(
            io.BytesIO(source.encode()), dict.fromkeys(KEYWORDS), [], {}
        ):
            found.add(message if isinstance(message, str) else message[0])
    return found


def catalog(language: str, kind: str) -> Catalog:
    path = ROOT / "locale" / language / "LC_MESSAGES" / f"django.{kind}"
    with path.open("rb") as handle:
        return read_po(handle) if kind == "po" else read_mo(handle)


def test_the_templates_have_strings_to_translate():
    strings = template_strings()
    assert "Your refund of %(amount)s is on its way" in strings
    assert "your card ending in %(card_last4)s" in strings
    assert len(strings) > 30


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_string_is_translated_with_its_placeholders(language):
    po = {str(m.id): m for m in catalog(language, "po") if m.id}
    missing = template_strings() - set(po)
    assert not missing, f"run `make messages`: not in {language}'s django.po: {missing}"
    for message in po.values():
        assert message.string, f"untranslated: {message.id!r}"
        assert not message.fuzzy, f"fuzzy: {message.id!r}"
        wanted = sorted(PLACEHOLDER.findall(str(message.id)))
        assert sorted(PLACEHOLDER.findall(str(message.string))) == wanted, message.id


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_committed_mo_is_the_po_compiled(language):
    po = {m.id: m.string for m in catalog(language, "po") if m.id}
    mo = {m.id: m.string for m in catalog(language, "mo") if m.id}
    assert mo == po, "run `make messages` and commit django.mo"
