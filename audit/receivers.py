"""What audit records of the apps below it: teams announces its changes (teams.signals.changed) and the
event log writes each as an Event, in the change's own transaction."""

from audit.events import log_event


def record_teams_change(sender, signal, subject, to_state: str, **details) -> None:
    """One Event for a change teams.services made (details: from_state, actor, team, reason, data)."""
    log_event(subject, to_state, **details)
