"""One error format for the whole API:

    {"error": {"code": "validation_error", "message": "…", "fields": {"gpu_milli": ["…"]}}}

Services raise Django's ValidationError and PermissionError; they arrive here
as 400 and 403 like DRF's own errors.
"""

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.views import exception_handler


def api_exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        fields = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(fields)
    elif isinstance(exc, PermissionError | PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = exception_handler(exc, context)
    if response is None:
        return None
    response.data = {"error": _body(exc, response.data)}
    return response


def _body(exc, data) -> dict:
    if isinstance(exc, exceptions.ValidationError):
        fields = data if isinstance(data, dict) else {"non_field_errors": data}
        first = next(iter(fields.items()))
        message = f"{first[0]}: {_first_text(first[1])}"
        return {"code": "validation_error", "message": message, "fields": fields}
    detail = data.get("detail", "") if isinstance(data, dict) else str(data)
    code = getattr(exc, "default_code", "error")
    return {"code": code, "message": str(detail)}


def _first_text(value) -> str:
    while isinstance(value, list | dict):
        value = next(iter(value.values())) if isinstance(value, dict) else value[0] if value else ""
    return str(value)
