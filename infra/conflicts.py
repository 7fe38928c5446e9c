"""The one error a service raises when an object is not in a state that allows what was asked."""

from django.core.exceptions import ValidationError


class StateConflict(ValidationError):
    """The object is not in a state that allows this; reported on `state` (HTTP 409 in the API, with the
    error code `api_code`)."""

    api_code = "conflict"

    def __init__(self, message: str):
        super().__init__({"state": message})
