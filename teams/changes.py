"""Where teams' services report each change for the event log. The log (audit) sits above teams, so it
hands teams its recorder when its app is ready (AuditConfig.ready), and teams calls it by name, inside
the change's transaction: an event that cannot be written undoes the change."""

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

_recorder: Callable[..., object] | None = None


def record_changes_with(recorder: Callable[..., object]) -> None:
    """Called once by audit: `recorder(subject, to_state, **details)` writes one event."""
    global _recorder
    _recorder = recorder


def record_change(subject, to_state: str, **details) -> None:
    """Record a change of `subject` (details: from_state, actor, team, reason, data; never a secret's
    value) in the caller's transaction."""
    if _recorder is None:
        raise ImproperlyConfigured("Nothing records teams' changes: the audit app is not installed.")
    _recorder(subject, to_state, **details)
