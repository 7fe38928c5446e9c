"""One error format for the whole API:

    {"error": {"code": "validation_error", "message": "…", "fields": {"gpu_milli": ["…"]}}}

Services raise Django's ValidationError and NotAllowed (a PermissionDenied); they arrive here
as 400 and 403 like DRF's own errors. `fields` is always there: empty when no
field is at fault.
"""

import logging

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.views import exception_handler

from infra.conflicts import StateConflict

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"  # the writes that take it: infra.api.idempotency


class Conflict(exceptions.APIException):
    status_code = 409
    default_code = "conflict"

    def __init__(self, detail, api_code: str = default_code):
        super().__init__(detail)
        self.api_code = api_code  # the envelope's `code`: what kind of conflict (StateConflict.api_code)


class TooLarge(exceptions.APIException):
    status_code = 413
    default_code = "too_large"
    default_detail = "The request body is larger than this server accepts."


class IdempotencyKeyReused(exceptions.APIException):
    status_code = 422
    default_code = "idempotency_key_reused"
    default_detail = (
        "This Idempotency-Key already answered another request (another method, path or body): "
        "use a new key for a new write."
    )


class DatabaseUnavailable(exceptions.APIException):
    """The database connection failed and the call could not be finished (a read is retried once first:
    infra.postgresql). A write in it was rolled back, unless the connection was lost while it
    committed: a repeat with the same Idempotency-Key is safe either way."""

    status_code = 503
    default_code = "database_unavailable"
    default_detail = (
        "The portal lost its database connection during this call; try again in a moment "
        "(a write: with the same Idempotency-Key)."
    )
    wait = 1  # seconds, DRF's Retry-After: the pool has a fresh connection by then


def api_exception_handler(exc, context):
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("answered 503 after a database error: %s", exc)
        exc = DatabaseUnavailable()
    elif isinstance(exc, StateConflict):
        exc = Conflict(exc.message_dict, exc.api_code)
    elif isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(fields)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, RequestDataTooBig):
        exc = TooLarge()
    response = exception_handler(exc, context)
    if response is None:
        return None
    response.data = {"error": _body(exc, response.data)}
    return response


def _body(exc, data) -> dict:
    if isinstance(exc, exceptions.ValidationError):
        fields = flat_fields(data if isinstance(data, dict) else {"non_field_errors": data})
        first = next(iter(fields.items()))
        message = f"{first[0]}: {_first_text(first[1])}"
        return {"code": "validation_error", "message": message, "fields": fields}
    if isinstance(exc, Conflict):
        return {"code": exc.api_code, "message": _first_text(data), "fields": data}
    detail = data.get("detail", "") if isinstance(data, dict) else str(data)
    code = getattr(exc, "default_code", "error")
    return {"code": code, "message": str(detail), "fields": {}}


def flat_fields(errors: dict, prefix: str = "") -> dict[str, list[str]]:
    """DRF's errors with those of nested items under dotted names ("gpus.0.mig_mode",
    "thresholds_percent.2"), as the parser names a NUL's place: each field a list of messages."""
    flat: dict[str, list[str]] = {}
    for key, value in errors.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flat_fields(value, f"{name}.")
        elif isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
            flat |= flat_fields({str(index): item for index, item in enumerate(value) if item}, f"{name}.")
        else:
            flat[name] = [str(item) for item in value] if isinstance(value, list) else [str(value)]
    return flat


def error_response(status: int, code: str, message: str, fields: dict) -> JsonResponse:
    """The envelope for answers made outside DRF's views (middleware)."""
    return JsonResponse({"error": {"code": code, "message": message, "fields": fields}}, status=status)


API_PREFIX = "/api/v1/"


def is_api(request) -> bool:
    """Whether the request is the API's, answered in the envelope, not with a page."""
    return request.path.startswith(API_PREFIX)


def server_error(request) -> HttpResponse:
    """handler500: the envelope under /api/v1/ (clients parse JSON), Django's page elsewhere."""
    if is_api(request):
        return error_response(500, "server_error", "The portal failed to answer; the error is logged.", {})
    return defaults.server_error(request)


def bad_request(request, exception) -> HttpResponse:
    """handler400 (a suspicious or malformed request Django refused before any view ran)."""
    if is_api(request):
        return error_response(400, "bad_request", str(exception) or "Bad request.", {})
    return defaults.bad_request(request, exception)


def _first_text(value) -> str:
    while isinstance(value, list | dict):
        value = next(iter(value.values())) if isinstance(value, dict) else value[0] if value else ""
    return str(value)


ERROR_RESPONSES = {
    "400": "Bad input: `fields` names each field and what is wrong with it.",
    "401": "No credentials, or an unknown, expired or revoked API token.",
    "403": "Authenticated, but not allowed.",
    "404": "No such object among those you may see.",
    "409": "The object's state does not allow this (for example cancelling a finished request).",
    "413": "The request body is larger than the server accepts.",
    "422": "The Idempotency-Key already answered another request (another method, path or body).",
    "429": "Too many requests for this user (all its tokens together) or node; wait Retry-After seconds.",
    "503": "The database connection failed mid-call; try again after Retry-After seconds (a write: with "
    "the same Idempotency-Key).",
}


def document_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: every operation may answer with the error format (422 only
    those taking an Idempotency-Key)."""
    result["components"]["schemas"]["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "fields"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "fields": {
                        "type": "object",
                        "description": "Each field at fault and what is wrong with it; empty when none is.",
                        "additionalProperties": {"type": "array", "items": {"type": "string"}},
                    },
                },
            }
        },
    }
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path in result["paths"].values():
        for operation in path.values():
            keyed = any(p["name"] == IDEMPOTENCY_KEY_HEADER for p in operation.get("parameters", ()))
            for code, description in ERROR_RESPONSES.items():
                if code == "413" and "requestBody" not in operation:
                    continue  # only a body can be too large
                if code == "422" and not keyed:
                    continue  # only a write that takes an Idempotency-Key
                operation["responses"].setdefault(code, {"description": description, "content": body})
    return result
