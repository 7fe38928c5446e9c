"""Idle auto-stop of interactive work, on an injected clock: the warning at its time (not before), the
graceful stop after it (checkpoint grace, then released), input or utilization calling it off, batch
work only noticed, the team's policy moving the times, and the notification channels told."""

import datetime as dt

import pytest
from django.contrib.contenttypes.models import ContentType

from audit.models import Event, Notice
from notifications.choices import ChannelKind, EventKind
from notifications.models import Delivery
from notifications.services import create_channel
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.services.migration import requeue_from_checkpoint
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.sessions import record_activity
from scheduler_app.services.transitions import transition_request
from teams.services import set_idle_policy
from telemetry.idle import idle_warning_lead_s
from telemetry.upkeep import telemetry_upkeep
from tests.telemetry.telemetry_helpers import plant

T0 = dt.datetime(2025, 3, 1, 11, 0, 30, tzinfo=dt.UTC)  # busy from here for 20 minutes, then idle
IDLE_FROM = dt.datetime(2025, 3, 1, 11, 20, tzinfo=dt.UTC)  # the end of the last busy minute


def idle_notices():
    return Notice.objects.filter(kind="idle")


def at(minutes: float) -> dt.datetime:
    """The clock, `minutes` after IDLE_FROM."""
    return IDLE_FROM + dt.timedelta(minutes=minutes)


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.TELEMETRY_ROLLUP_LOOKBACK_S = 5 * 3600
    settings.TELEMETRY_IDLE_AFTER_S = 1800
    settings.PREEMPTION_GRACE_S = 120


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=1)


@pytest.fixture
def start(member, team, node):
    """start(command="") -> a request running on node-1's card since two hours before T0; that card busy
    (80 %) for 20 minutes from T0, then at 1 % for an hour."""

    def make(command="", name="notebook"):
        request = submit_request(user=member, team=team, name=name, gpu_milli=500, command=command)
        allocate(request, [Slice(node.gpus.get().pk, 500, 4096)])
        transition_request(request, RequestState.RUNNING)
        started = T0 - dt.timedelta(hours=2)
        Allocation.objects.filter(request=request).update(started_at=started)
        GpuRequest.objects.filter(pk=request.pk).update(started_at=started)
        plant(node.gpus.get(), T0, [80] * 20 + [1] * 60)
        return request

    return make


def state(request) -> str:
    request.refresh_from_db()
    return request.state


def events(request, to_state):
    model = ContentType.objects.get_for_model(GpuRequest)
    return Event.objects.filter(content_type=model, object_id=request.pk, to_state=to_state)


def test_the_warning_lead_is_a_tenth_of_the_idle_time_between_one_and_five_minutes():
    assert [idle_warning_lead_s(s) for s in (300, 1800, 3600, 7200)] == [60, 180, 300, 300]


def test_an_idle_session_is_warned_at_its_time_then_stopped_gracefully_and_released(start):
    session = start()

    telemetry_upkeep(at(26.9))  # 30 min idle time, warned 3 min before: at 27
    assert not idle_notices().exists()

    telemetry_upkeep(at(27))
    warning = idle_notices().get()
    assert (warning.kind, warning.resolved_at) == ("idle", None)
    assert "It stops at 11:50 UTC, with 120 s to checkpoint" in warning.text
    assert warning.data["stop_at"] == at(30).isoformat()
    assert events(session, "idle").count() == 1  # the request's timeline and its live stream

    telemetry_upkeep(at(29.9))
    assert state(session) == RequestState.RUNNING

    telemetry_upkeep(at(30))
    assert state(session) == RequestState.MIGRATING
    assert (session.stop_by, session.stop_reason) == (at(32), "idle for 30 min")
    assert session.release_when_stopped
    stop = events(session, RequestState.MIGRATING).get()
    assert (stop.actor_label, stop.reason) == (
        "idle policy",
        "idle for 30 min; checkpoint and stop by 11:52:00 UTC",
    )
    assert Allocation.objects.committed().filter(request=session).exists()  # billed until it stopped

    requeue_from_checkpoint([session.pk], stopped_at=at(31))  # its agent saw it stop

    assert state(session) == RequestState.RELEASED
    assert session.ended_at == at(31)
    assert not Allocation.objects.committed().filter(request=session).exists()
    assert (
        "idle for 30 min; stopped, no checkpoint reported"
        in events(session, RequestState.RELEASED).get().reason
    )


def test_a_session_whose_warning_came_late_still_gets_the_whole_lead(start):
    session = start()

    telemetry_upkeep(at(45))  # no check ran at 27: warned now, stopped 3 min later
    assert idle_notices().get().data["stop_at"] == at(48).isoformat()
    telemetry_upkeep(at(47))
    assert state(session) == RequestState.RUNNING
    telemetry_upkeep(at(48))
    assert state(session) == RequestState.MIGRATING


def test_terminal_input_after_the_warning_calls_the_stop_off(start):
    session = start()
    telemetry_upkeep(at(27))

    record_activity(session, at(28))

    assert idle_notices().get().resolved_at == at(28)
    assert events(session, "active again").count() == 1
    telemetry_upkeep(at(30))
    assert state(session) == RequestState.RUNNING
    assert idle_notices().count() == 1  # idle since 28 now: warned at 55, not before
    telemetry_upkeep(at(54.9))
    assert idle_notices().count() == 1
    telemetry_upkeep(at(55))
    assert idle_notices().open().get().data["stop_at"] == at(58).isoformat()


def test_activity_is_stored_to_its_resolution(start):
    session = start()

    assert record_activity(session, at(1))
    assert not record_activity(session, at(1.4))  # within 30 s: nothing written
    assert record_activity(session.pk, at(1.5))

    session.refresh_from_db()
    assert session.last_activity_at == at(1.5)
    assert not events(session, "active again").exists()  # no warning to withdraw


def test_utilization_over_the_threshold_after_the_warning_calls_the_stop_off(start, node):
    session = start()
    telemetry_upkeep(at(27))

    plant(node.gpus.get(), at(28) + dt.timedelta(seconds=10), [40])  # the user ran a cell on the GPU
    telemetry_upkeep(at(30))

    assert state(session) == RequestState.RUNNING
    assert idle_notices().get().resolved_at == at(30)


def test_idle_batch_work_only_gets_the_notice(start):
    job = start(command="python train.py", name="train")

    telemetry_upkeep(at(27))
    assert not idle_notices().exists()  # no warning: nothing will stop it
    telemetry_upkeep(at(30))
    notice = idle_notices().get()
    assert "under 5 % utilization for 30 min. Release it if it is done." in notice.text
    telemetry_upkeep(at(50))
    assert state(job) == RequestState.RUNNING
    assert idle_notices().count() == 1


def test_the_teams_idle_time_and_threshold_move_the_warning_and_the_stop(start, team, team_admin):
    session = start()
    telemetry_upkeep(at(-11))  # 80 % is busy under the site's 5 %: not idle
    assert not idle_notices().exists()

    set_idle_policy(team, release=False, idle_minutes=10, util_percent=90, actor=team_admin)
    # Under 90 % counts as idle now: the 80 % minutes too, so it is idle since its readings began (11:00).
    telemetry_upkeep(at(-11.1))
    assert not idle_notices().exists()
    telemetry_upkeep(at(-11))
    assert idle_notices().get().data["stop_at"] == at(-10).isoformat()  # 10 % of 10 min: 1 min lead
    telemetry_upkeep(at(-10.1))
    assert state(session) == RequestState.RUNNING
    telemetry_upkeep(at(-10))
    assert state(session) == RequestState.MIGRATING
    assert session.stop_reason == "idle for 10 min"


def test_the_team_channels_hear_of_the_warning_and_the_stop(start, team, team_admin):
    session = start()
    channel, _ = create_channel(
        team_admin, team=team, kind=ChannelKind.EMAIL, name="ops", email="ops@example.com"
    )

    telemetry_upkeep(at(27))
    telemetry_upkeep(at(30))
    requeue_from_checkpoint([session.pk], stopped_at=at(31))

    kinds = Delivery.objects.filter(channel=channel).values_list("kind", flat=True)
    assert sorted(kinds) == sorted(
        [EventKind.IDLE_WARNING, EventKind.IDLE_STOPPED, EventKind.REQUEST_FINISHED]
    )
