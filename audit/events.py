"""Writing the event log: one row per state change, published to the team's live stream and handed to
the apps above that follow the log (notifications), in the writer's transaction."""

from collections.abc import Callable, Sequence

from django.contrib.contenttypes.models import ContentType

from audit.models import Event
from infra.bulk_insert import insert_rows
from infra.live import publish_events_after_commit


def build_event(
    subject,
    to_state: str,
    *,
    from_state: str = "",
    actor=None,
    actor_name: str = "",
    reason: str = "",
    team=None,
    data: dict | None = None,
) -> Event:
    """An unsaved Event for `subject`; team defaults to the subject's own team, if it has one.

    `data` holds structured details (JSON: numbers, money as decimal strings), never a state.
    """
    # The subject's team by id: a request loaded without its team needs no query for it.
    team_id = team.pk if team is not None else getattr(subject, "team_id", None)
    return event_about(
        type(subject),
        subject.pk,
        to_state,
        team_id=team_id,
        from_state=from_state,
        actor=actor,
        actor_name=actor_name,
        reason=reason,
        data=data,
    )


def event_about(
    model,
    object_id: int,
    to_state: str,
    *,
    team_id: int | None,
    from_state: str = "",
    actor=None,
    actor_name: str = "",
    reason: str = "",
    data: dict | None = None,
) -> Event:
    """`build_event` for a row of `model` known by its id and team id, not loaded (a pass moves
    thousands)."""
    # By ids (the content type cached by Django): setting related objects costs more than the rest.
    return Event(
        content_type_id=ContentType.objects.get_for_model(model).pk,
        object_id=object_id,
        team_id=team_id,
        actor_id=actor.pk if actor is not None else None,
        actor_label=actor.get_username() if actor is not None else (actor_name or "system"),
        from_state=from_state,
        to_state=to_state,
        reason=reason[:500],
        data=data or {},
    )


# Called with the saved events of each record_events, inside its transaction; an app above audit hands
# its follower over when its app is ready (NotificationsConfig.ready), so audit imports none of them.
_followers: list[Callable[[list[Event]], object]] = []


def follow_events(follower: Callable[[list[Event]], object]) -> None:
    """Have `follower(events)` called with every batch of events written from now on (once per follower)."""
    if follower not in _followers:
        _followers.append(follower)


def record_events(events: Sequence[Event]) -> list[Event]:
    """Append the events in one insert, hand them to the followers (in the same transaction: what they
    write commits or rolls back with the events), then publish each to its team and to the operators'
    stream once the transaction commits."""
    saved = insert_rows(Event, events)
    for follower in _followers:
        follower(saved)
    publish_events_after_commit(
        (
            event.team_id,
            {
                "object": event.subject_type().model,
                "id": event.object_id,
                "from": event.from_state,
                "to": event.to_state,
                "reason": event.reason,
                "data": event.data,
                "actor": event.actor_label,
                "at": event.created_at.isoformat(),
            },
        )
        for event in saved
    )
    return saved


def log_event(subject, to_state: str, **kwargs) -> Event:
    """Append one Event (see build_event for the arguments)."""
    return record_events([build_event(subject, to_state, **kwargs)])[0]
