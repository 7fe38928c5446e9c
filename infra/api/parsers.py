"""The API's JSON parser: it refuses what would otherwise fail deep inside a view or the database."""

import re

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

# The deepest body the API takes is a sample batch (object > list > object > value); this leaves room
# and stays far from Python's recursion limit, which a deeper body would reach (a 500).
MAX_JSON_DEPTH = 32
NUL_MESSAGE = "NUL characters are not allowed."
SURROGATE_MESSAGE = "A value cannot hold lone surrogates (text that is not valid Unicode)."
SURROGATE_KEY_MESSAGE = "A key cannot hold lone surrogates (text that is not valid Unicode)."
# JSON may escape half a surrogate pair ("\ud800"); Python keeps it as a lone code point in the str.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonParser(JSONParser):
    """JSON bodies nested at most MAX_JSON_DEPTH deep (else 400 parse_error), free of NUL characters in
    keys and strings, which PostgreSQL cannot store in text, and of lone surrogates, which no answer can
    encode, not even the refusal that would quote them (else 400 naming the place)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(_too_deep()) from None
        found = _bad_text(data, path=(), depth=0)
        if found is not None:
            place, message = found
            raise ValidationError({place or "non_field_errors": [message]})
        return data


def _bad_text(value, path: tuple, depth: int) -> tuple[str, str] | None:
    """(the dotted path, why) of the first key or string the API refuses; None when none; ParseError when
    too deep. A key with a NUL is named itself; one with a lone surrogate by the object holding it, since
    its own name could not be written in the answer."""
    if depth > MAX_JSON_DEPTH:
        raise ParseError(_too_deep())
    if isinstance(value, str):
        if "\x00" in value:
            return ".".join(path), NUL_MESSAGE
        return (".".join(path), SURROGATE_MESSAGE) if _LONE_SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        place = (*path, str(key))
        if "\x00" in place[-1]:
            return ".".join(place), NUL_MESSAGE
        if _LONE_SURROGATE.search(place[-1]):
            return ".".join(path), SURROGATE_KEY_MESSAGE
        found = _bad_text(item, place, depth + 1)
        if found is not None:
            return found
    return None


def _too_deep() -> str:
    return f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep."
