"""Refuse NUL characters in query parameters and form fields before any view runs.

PostgreSQL cannot store or compare NUL in text: `?search=%00` reached the database and
answered a 500. JSON bodies are checked by the API's parser (infra.api.parsers).
"""

from django.http import HttpResponseBadRequest

from infra.api.errors import error_response, is_api
from infra.api.parsers import NUL_MESSAGE


class RefuseNulCharacters:
    """400 naming the first parameter with a NUL: the API's envelope under /api/v1/, plain text on pages."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        api = is_api(request)
        # The API parses its own (JSON) bodies; pages post forms, which request.POST decodes.
        name = _name_with_nul(request.GET) or (None if api else _name_with_nul(request.POST))
        if name is None:
            return self.get_response(request)
        message = f"{name}: {NUL_MESSAGE}"
        if api:
            return error_response(400, "validation_error", message, {name: [NUL_MESSAGE]})
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


def _name_with_nul(params) -> str | None:
    for name, values in params.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            return name
    return None
