"""The outbox: every event a channel wants becomes a Delivery row in the event's own transaction, so an
event that commits is delivered (by a worker, after the commit) and one that rolls back never is."""

import logging
import uuid
from collections import defaultdict

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from kombu.exceptions import OperationalError

from audit.models import Event
from notifications.kinds import event_kind, payload
from notifications.models import Channel, Delivery
from teams.models import Membership, Team

log = logging.getLogger(__name__)

DELIVER_TASK = "notifications.deliver"


def enqueue_deliveries(events: list[Event]) -> list[Delivery]:
    """The deliveries of `events` to each unpaused channel that wants them: a team's channels hear of its
    events; a user's channels of those about their own work (their requests, their budget) in the teams
    they belong to. Called by audit.events.record_events for every batch it writes."""
    kinds = {event.pk: kind for event in events if event.team_id and (kind := event_kind(event))}
    if not kinds:
        return []
    mapped = [event for event in events if event.pk in kinds]
    team_ids = {event.team_id for event in mapped}
    channels = list(
        Channel.objects.filter(paused_at__isnull=True)
        .filter(Q(team_id__in=team_ids) | Q(user__memberships__team_id__in=team_ids))
        .distinct()
    )
    if not channels:
        return []
    subjects = _subjects(mapped, with_users=any(c.user_id for c in channels))
    members = set(
        Membership.objects.filter(
            team_id__in=team_ids, user_id__in={c.user_id for c in channels if c.user_id}
        ).values_list("team_id", "user_id")
    )
    teams = Team.objects.in_bulk(team_ids)
    deliveries = []
    for event in mapped:
        kind = kinds[event.pk]
        name, owner = subjects.get((event.content_type_id, event.object_id), ("", None))
        for channel in channels:
            if not channel.wants(kind):
                continue
            if channel.team_id is not None and channel.team_id != event.team_id:
                continue
            if channel.user_id is not None and (
                owner != channel.user_id or (event.team_id, owner) not in members
            ):
                continue
            delivery_id = uuid.uuid4()
            deliveries.append(
                Delivery(
                    id=delivery_id,
                    channel=channel,
                    event=event,
                    kind=kind,
                    payload=payload(
                        delivery_id, kind, event, team=teams.get(event.team_id), subject_name=name
                    ),
                    next_attempt_at=event.created_at,
                    created_at=event.created_at,
                )
            )
    Delivery.objects.bulk_create(deliveries)
    send_after_commit([d.pk for d in deliveries])
    return deliveries


def _subjects(events: list[Event], *, with_users: bool) -> dict[tuple[int, int], tuple[str, int | None]]:
    """(content type id, object id) -> (the subject's name, its user's id) for the events' subjects whose
    model has those fields; one query per model."""
    ids = defaultdict(set)
    types = {}
    for event in events:
        ids[event.content_type_id].add(event.object_id)
        types[event.content_type_id] = event.subject_type()
    found = {}
    for type_id, object_ids in ids.items():
        model = types[type_id].model_class()
        fields = {field.name for field in model._meta.concrete_fields}
        wanted = [f for f in ("name", "user") if f in fields and (f == "name" or with_users)]
        if not wanted:
            continue
        columns = ["pk", *("user_id" if f == "user" else f for f in wanted)]
        for row in model._default_manager.filter(pk__in=object_ids).values(*columns):
            found[type_id, row["pk"]] = (row.get("name", ""), row.get("user_id"))
    return found


def send_after_commit(delivery_ids: list) -> None:
    """Once the transaction commits, queue a Celery task per delivery (production). The embedded default,
    and any delivery whose message is lost (broker away, worker killed), is sent by the periodic scan
    (CELERY_BEAT_SCHEDULE's notification-deliveries)."""
    if not delivery_ids or not settings.REDIS_URL:
        return

    def queue() -> None:
        try:
            for delivery_id in delivery_ids:
                current_app.send_task(DELIVER_TASK, (str(delivery_id),), retry=False)
        except OperationalError as error:
            log.warning("cannot reach the broker to send notifications; the periodic scan will: %s", error)

    transaction.on_commit(queue)
