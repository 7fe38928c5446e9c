"""Which events of the log a channel hears about, and what it is told: the one mapping from an Event (its
subject's model, from and to states, actor) to an EventKind, and the payload every channel kind sends."""

from audit.models import Event
from notifications.choices import EventKind
from notifications.constants import IDLE_POLICY_ACTOR

# The subjects' models by their content type's name (audit sits below them: it names none of them).
REQUEST, BUDGET = "gpurequest", "budget"
ACTIVE = {"scheduled", "running", "migrating"}
REQUEST_KINDS = {
    "running": EventKind.REQUEST_STARTED,
    "succeeded": EventKind.REQUEST_FINISHED,
    "released": EventKind.REQUEST_FINISHED,
    "cancelled": EventKind.REQUEST_FINISHED,
    "failed": EventKind.REQUEST_FAILED,
    "preempted": EventKind.REQUEST_RECLAIMED,
    "migrating": EventKind.REQUEST_RECLAIMED,
    "idle": EventKind.IDLE_WARNING,
    "checkpoint_missed": EventKind.CHECKPOINT_MISSED,
}


def event_kind(event: Event) -> str | None:
    """The EventKind `event` is, or None when no channel hears of it."""
    model = event.subject_type().model
    if model == BUDGET:
        return EventKind.BUDGET_THRESHOLD if event.to_state == "budget_crossed" else None
    if model != REQUEST:
        return None
    if event.to_state == "pending":  # back in the queue from a run: moved, with the work it lost
        return EventKind.REQUEST_MOVED if event.from_state in ACTIVE else None
    # Released (batch work, under the team's policy) or told to stop (interactive work) for being idle.
    if event.to_state in ("released", "migrating") and event.actor_label == IDLE_POLICY_ACTOR:
        return EventKind.IDLE_STOPPED
    if event.to_state == "cancelled" and event.from_state not in ACTIVE:
        return None  # withdrawn before it ran: nothing to tell
    return REQUEST_KINDS.get(event.to_state)


def summary(kind: str, *, team_name: str, subject_name: str, reason: str) -> str:
    """One line for people (email, Slack): "[Vision] train-42: Request failed — exit code 1"."""
    label = EventKind(kind).label
    where = f"[{team_name}] " if team_name else ""
    what = f"{subject_name}: {label}" if subject_name else label
    return f"{where}{what}" + (f" — {reason}" if reason else "")


def payload(delivery_id, kind: str, event: Event, *, team, subject_name: str) -> dict:
    """The JSON a webhook receives (Slack and email get its `text`); `id` is the same on every try."""
    model = event.subject_type().model
    text = summary(kind, team_name=team.name if team else "", subject_name=subject_name, reason=event.reason)
    return {
        "id": str(delivery_id),
        "type": kind,
        "created_at": event.created_at.isoformat(),
        "event_id": event.pk,
        "team": {"slug": team.slug, "name": team.name} if team else None,
        "subject": {
            "type": "request" if model == REQUEST else model,
            "id": event.object_id,
            "name": subject_name,
        },
        "from_state": event.from_state,
        "to_state": event.to_state,
        "actor": event.actor_label,
        "reason": event.reason,
        "data": event.data,
        "text": text,
    }
