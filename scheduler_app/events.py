"""Writing the event log: one row per state change, published to the team's live stream."""

from django.contrib.contenttypes.models import ContentType

from scheduler_app.live import publish_after_commit
from scheduler_app.models import Event


def log_event(
    subject,
    to_state: str,
    *,
    from_state: str = "",
    actor=None,
    actor_name: str = "",
    reason: str = "",
    team=None,
) -> Event:
    """Append an Event for `subject`; team defaults to the subject's own team, if it has one."""
    team = team or getattr(subject, "team", None)
    event = Event.objects.create(
        content_type=ContentType.objects.get_for_model(subject),
        object_id=subject.pk,
        team=team,
        actor=actor,
        actor_label=actor.get_username() if actor is not None else (actor_name or "system"),
        from_state=from_state,
        to_state=to_state,
        reason=reason[:500],
    )
    if team is not None:
        publish_after_commit(
            team.pk,
            {
                "object": event.content_type.model,
                "id": subject.pk,
                "from": from_state,
                "to": to_state,
                "reason": event.reason,
                "actor": event.actor_label,
                "at": event.created_at.isoformat(),
            },
        )
    return event
