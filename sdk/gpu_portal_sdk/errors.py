"""Typed errors: each HTTP failure of the portal becomes one class a caller can catch.

Every error carries the portal's error body, `{"error": {"code", "message", "fields"}}`,
as `status`, `code`, `message` and `fields`.
"""


class PortalError(Exception):
    """Base class: `status` is the HTTP status (None when no answer came), `fields` the field errors."""

    def __init__(self, message: str, *, status: int | None = None, code: str = "error", fields=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.fields: dict[str, list[str]] = fields or {}


class AuthenticationError(PortalError):
    """401: no token, or an unknown, expired or revoked one."""


class PermissionDeniedError(PortalError):
    """403: authenticated, but not allowed."""


class NotFoundError(PortalError):
    """404: no such object among those your teams may see (another team's request looks absent)."""


class ValidationError(PortalError):
    """400: bad input; `fields` maps each field to what is wrong with it."""


class ConflictError(PortalError):
    """409: the object's state does not allow the action (for example cancelling a finished request)."""


class AlreadyEndedError(ConflictError):
    """409 with code `already_ended`: the request to cancel or release has already ended (the message names
    its state: "Request 13 is already cancelled."); nothing changed. Callers that want it gone may take
    it as done, as `scancel` does for work that has ended."""


class RateLimitedError(PortalError):
    """429 still after the retries; `retry_after` is the wait, in seconds, the portal asked for last."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServiceUnavailableError(PortalError):
    """5xx: the portal or a proxy in front of it failed, still after the retries where they were safe."""


class ConnectionFailedError(PortalError):
    """No HTTP answer at all: refused, reset, timed out or the name did not resolve."""


class ConfigurationError(PortalError):
    """No portal address or token was given and none was found in the environment or the config file
    (the message names what is missing and where it looked), or that file is unreadable."""

    def __init__(self, message: str, **kwargs):
        super().__init__(message, **({"code": "not_configured"} | kwargs))


class ResourceBusyError(PortalError):
    """No capacity was free within the wait. `request_id` is the request waited for; `cancelled`
    tells whether the SDK withdrew the request it had made itself."""

    def __init__(self, message: str, *, request_id: int, cancelled: bool = False, **kwargs):
        super().__init__(message, **kwargs)
        self.request_id = request_id
        self.cancelled = cancelled


class RequestFailedError(PortalError):
    """The request ended without being placed or running (failed, cancelled, preempted, ...)."""

    def __init__(self, message: str, *, request_id: int, state: str, **kwargs):
        super().__init__(message, **kwargs)
        self.request_id = request_id
        self.state = state


BY_STATUS: dict[int, type[PortalError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitedError,
}


def error_for_status(status: int, code: str = "") -> type[PortalError]:
    """The class for an HTTP status and the error body's `code`."""
    if status >= 500:
        return ServiceUnavailableError
    if status == 409 and code == "already_ended":
        return AlreadyEndedError
    return BY_STATUS.get(status, PortalError)
