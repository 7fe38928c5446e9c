"""How a page action says on the next page how it went (django.contrib.messages)."""

from contextlib import contextmanager

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError


@contextmanager
def told(request, *, refused: str, done: str, refusals=(PermissionDenied, ValidationError)):
    """Say on the next page how the action in the block went: `done`, or `refused` and why when the
    block raised one of `refusals` (by default a service's ValidationError or NotAllowed, a
    PermissionDenied); anything else propagates."""
    try:
        yield
    except refusals as refusal:
        why = " ".join(refusal.messages) if isinstance(refusal, ValidationError) else str(refusal)
        messages.error(request, f"{refused}: {why}")
    else:
        messages.success(request, done)
