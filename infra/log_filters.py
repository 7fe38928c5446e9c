"""Filters of the portal's logging configuration (settings.LOGGING)."""

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A 4xx answer (a refusal, a missing page) is the client's mistake, not the server's: Django logs
    PermissionDenied and Http404 with the exception's traceback attached, which reads as a crash in
    the log. Keep the one line (method, path, status) and drop the traceback; 5xx keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = record.exc_text = None
        return True
