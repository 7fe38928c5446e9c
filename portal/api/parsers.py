"""The API's JSON parser: it refuses what would otherwise fail deep inside a view or the database."""

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

# The deepest body the API takes is a sample batch (object > list > object > value); this leaves room
# and stays far from Python's recursion limit, which a deeper body would reach (a 500).
MAX_JSON_DEPTH = 32
NUL_MESSAGE = "NUL characters are not allowed."


class JsonParser(JSONParser):
    """JSON bodies nested at most MAX_JSON_DEPTH deep (else 400 parse_error) and free of NUL characters
    in keys and strings (else 400 naming the place), which PostgreSQL cannot store in text."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(_too_deep()) from None
        place = _place_of_nul(data, path=(), depth=0)
        if place is not None:
            raise ValidationError({place or "non_field_errors": [NUL_MESSAGE]})
        return data


def _place_of_nul(value, path: tuple, depth: int) -> str | None:
    """The dotted path of the first key or string holding a NUL (None when none); ParseError when too deep."""
    if depth > MAX_JSON_DEPTH:
        raise ParseError(_too_deep())
    if isinstance(value, str):
        return ".".join(path) if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        place = (*path, str(key))
        if "\x00" in place[-1]:
            return ".".join(place)
        found = _place_of_nul(item, place, depth + 1)
        if found is not None:
            return found
    return None


def _too_deep() -> str:
    return f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep."
