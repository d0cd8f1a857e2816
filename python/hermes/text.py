"""The one rule for text that enters hermes from outside: it is made valid Unicode.

A Python ``str`` can hold lone surrogates (U+D800–U+DFFF): JSON's ``"\\ud800"`` escape, which
JavaScript clients send for a broken string, decodes to one, and aiohttp keeps a header's
bytes that are not UTF-8 as surrogate escapes. Such a string cannot be encoded as UTF-8, so
it breaks whatever encodes it next (the ``openai`` client raises ``UnicodeEncodeError``).

``valid_text`` replaces each lone surrogate by one U+FFFD, and joins a surrogate pair written
as two halves into its character — exactly what the store does to the rows it writes
(``rust/src/encode.rs``), so text is the same whether it was cleaned here or there.
``valid_strings`` applies it to every string of a JSON document, keys included.
"""

from __future__ import annotations

from typing import TypeVar, cast

_T = TypeVar("_T")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (itself when it has none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16, where a lone surrogate is one unit: one U+FFFD each (through UTF-8
        # it would be three bytes, and three replacement characters).
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def valid_strings(document: _T) -> _T:
    """A copy of the JSON ``document`` (dicts, lists, strings, scalars) whose strings, keys
    included, are ``valid_text``."""
    return cast(_T, _cleaned(document))


def _cleaned(value: object) -> object:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    if isinstance(value, dict):
        return {_cleaned(key): _cleaned(item) for key, item in value.items()}
    return value
