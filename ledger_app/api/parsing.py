"""Turning Stripe-style requests into one dict of parameters, before any is checked.

Form bodies and query strings arrive as flat keys: `metadata[order]=A-17`,
`expand[0]=refunds`, `expand[]=refunds`. They are folded into `{"metadata": {...}}` and
`{"expand": [...]}`; anything else with brackets, and any key sent twice, is refused.
JSON bodies are taken as they are, once they are known to be an object of valid Unicode
that names no key twice and nests no deeper than MAX_JSON_DEPTH. What each endpoint
accepts is then checked by its serializer (params.py).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Mapping
from typing import IO, Any

from django.http import QueryDict
from rest_framework import exceptions as drf_exceptions
from rest_framework import parsers
from rest_framework.utils import json as drf_json

from ledger_app.api.errors import ApiError
from ledger_app.text import has_unstorable_characters

BRACKETED = re.compile(r"^([A-Za-z_]+)\[([^\[\]]*)\]$")
LIST_PARAMS = {"expand"}
DICT_PARAMS = {"metadata"}
# The deepest a JSON body may nest. A valid request nests 2 deep (metadata, expand); far
# below this, every step after parsing (checks, hashing for the idempotency key,
# rendering) is safe from Python's recursion limit, whatever stack the server runs on.
MAX_JSON_DEPTH = 32
TOO_DEEP = f"nested more than {MAX_JSON_DEPTH} levels deep"


class Folded(dict):
    """Parameters after folding; remembers whether they came as JSON (typed values)."""

    from_json = False


def fold(data: QueryDict | Mapping) -> Folded:
    """The parameters of a request as one dict, for the endpoint's serializer to check."""
    if isinstance(data, QueryDict):
        return _fold_form(data)
    if not isinstance(data, Mapping):
        raise ApiError("The request body must be an object.", code="body_invalid")
    if not _storable(data):
        raise ApiError(
            "The request body holds text that is not valid Unicode.", code="body_invalid"
        )
    params = Folded(data)
    params.from_json = True
    return params


def _fold_form(data: QueryDict) -> Folded:
    folded = Folded()
    for raw_key, values in data.lists():
        match = BRACKETED.match(raw_key)
        if match is not None:
            _fold_bracketed(folded, raw_key, match[1], match[2], values)
        elif "[" in raw_key or "]" in raw_key:
            raise _invalid_name(raw_key)
        else:
            _fold_plain(folded, raw_key, values)
    return folded


def _fold_plain(folded: Folded, key: str, values: list[str]) -> None:
    if len(values) != 1:
        raise ApiError(f"{key} was sent more than once.", code="parameter_invalid", param=key)
    if key in DICT_PARAMS and values[0] == "":
        folded[key] = {}  # Stripe's way to send an empty hash
        return
    _put(folded, key, values[0])


def _fold_bracketed(folded: Folded, raw_key: str, name: str, inner: str, values: list[str]) -> None:
    """`expand[]=a`, `expand[0]=a` into a list; `metadata[k]=v` into a dict."""
    if name in LIST_PARAMS and (inner == "" or inner.isdigit()):
        existing = folded.setdefault(name, [])
        if not isinstance(existing, list):
            raise ApiError(f"{name} must be a list.", code="parameter_invalid", param=name)
        existing.extend(values)
    elif name in DICT_PARAMS and inner != "":
        existing = folded.setdefault(name, {})
        if not isinstance(existing, dict) or inner in existing or len(values) != 1:
            raise ApiError(
                f"Invalid {name}[{inner}].", code="parameter_invalid", param=f"{name}[{inner}]"
            )
        existing[inner] = values[0]
    else:
        raise _invalid_name(raw_key)


def _invalid_name(raw_key: str) -> ApiError:
    return ApiError(f"Invalid parameter name: {raw_key}", code="parameter_invalid", param=raw_key)


def _storable(value: Any) -> bool:
    """No lone surrogates anywhere: JSON allows them, nothing downstream can store them."""
    if isinstance(value, str):
        return not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, Mapping):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_storable(v) for v in value)
    return True


def _put(folded: dict, key: str, value: Any) -> None:
    if key in folded:
        raise ApiError(f"{key} was sent more than once.", code="parameter_invalid", param=key)
    folded[key] = value


class _JsonObject(dict):
    """A parsed JSON object that remembers the first key it was given twice."""

    repeated: str | None = None


def _object(pairs: list[tuple[str, Any]]) -> _JsonObject:
    result = _JsonObject()
    for key, value in pairs:
        if key in result and result.repeated is None:
            result.repeated = key
        result[key] = value
    return result


def _refuse_repeated_keys(value: Any, path: str = "") -> Any:
    """A JSON object naming a key twice is as ambiguous as `amount=1&amount=2` in a form:
    refused (naming it as the form would, `metadata[a]`), never "the last one wins".
    Returns the value with plain dicts."""
    if isinstance(value, list):
        return [_refuse_repeated_keys(item, f"{path}[]") for item in value]
    if not isinstance(value, dict):
        return value
    name = (lambda key: f"{path}[{key}]") if path else (lambda key: key)
    if getattr(value, "repeated", None) is not None:
        param = name(value.repeated)  # type: ignore[attr-defined]  # a dict that says so
        if has_unstorable_characters(param):  # not even an error message can carry it
            raise drf_exceptions.ParseError("not valid Unicode")
        raise ApiError(
            f"{param[:60]} was sent more than once.", code="parameter_invalid", param=param
        )
    return {key: _refuse_repeated_keys(item, name(key)) for key, item in value.items()}


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels, found without recursion."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser (strict: no NaN or Infinity), refusing deep nesting and objects
    that repeat a key.

    Nesting past MAX_JSON_DEPTH is refused whether the parser itself gives up (Python's
    recursion limit, which depends on how deep the server's stack already is) or parses it:
    a body that parses only just would crash the first recursive step after it."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:  # any JSON value: a list or a number is the views' to refuse
        # DRF 3.18's, which its stubs (3.16) do not have yet.
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        try:
            text = codecs.getreader(encoding)(stream).read()
            parsed = json.loads(
                text, parse_constant=drf_json.strict_constant, object_pairs_hook=_object
            )
        except RecursionError:
            raise drf_exceptions.ParseError(TOO_DEEP) from None
        except ValueError:
            raise drf_exceptions.ParseError("not valid JSON") from None
        if _deeper_than(parsed, MAX_JSON_DEPTH):
            raise drf_exceptions.ParseError(TOO_DEEP)
        return _refuse_repeated_keys(parsed)
