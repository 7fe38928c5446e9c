"""Which events of the log a channel hears about: the one mapping, over every kind."""

import pytest
from django.contrib.contenttypes.models import ContentType

from audit.models import Event
from billing_app.models import Budget
from notifications.choices import EventKind
from notifications.constants import IDLE_POLICY_ACTOR
from notifications.kinds import event_kind
from scheduler_app.models import GpuRequest, Node
from telemetry.idle import POLICY


def event(model, to_state, from_state="", actor="system") -> Event:
    return Event(
        content_type=ContentType.objects.get_for_model(model),
        object_id=1,
        from_state=from_state,
        to_state=to_state,
        actor_label=actor,
    )


@pytest.mark.parametrize(
    ("model", "from_state", "to_state", "actor", "kind"),
    [
        (GpuRequest, "scheduled", "running", "agent", EventKind.REQUEST_STARTED),
        (GpuRequest, "running", "succeeded", "agent", EventKind.REQUEST_FINISHED),
        (GpuRequest, "running", "released", "bob", EventKind.REQUEST_FINISHED),
        (GpuRequest, "running", "released", IDLE_POLICY_ACTOR, EventKind.IDLE_STOPPED),
        (GpuRequest, "running", "cancelled", "budget", EventKind.REQUEST_FINISHED),
        (GpuRequest, "pending", "cancelled", "bob", None),
        (GpuRequest, "running", "failed", "agent", EventKind.REQUEST_FAILED),
        (GpuRequest, "running", "migrating", "reclaim", EventKind.REQUEST_RECLAIMED),
        (GpuRequest, "running", "migrating", IDLE_POLICY_ACTOR, EventKind.IDLE_STOPPED),
        (GpuRequest, "scheduled", "preempted", "scheduler", EventKind.REQUEST_RECLAIMED),
        (GpuRequest, "migrating", "pending", "reclaim", EventKind.REQUEST_MOVED),
        (GpuRequest, "", "pending", "bob", None),
        (GpuRequest, "", "idle", "telemetry checks", EventKind.IDLE_WARNING),
        (GpuRequest, "", "checkpoint_missed", "watchdog", EventKind.CHECKPOINT_MISSED),
        (Budget, "", "budget_crossed", "budget", EventKind.BUDGET_THRESHOLD),
        (Budget, "", "budget_set", "alice", None),
        (Node, "ready", "lost", "watchdog", None),
    ],
)
def test_each_event_maps_to_its_kind(db, model, from_state, to_state, actor, kind):
    assert event_kind(event(model, to_state, from_state, actor)) == kind


def test_the_idle_policys_name_is_the_one_telemetry_logs_its_releases_under():
    assert IDLE_POLICY_ACTOR == POLICY
