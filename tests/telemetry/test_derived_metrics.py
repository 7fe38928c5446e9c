"""Derived metrics on running work: a jittery job, a leak, an idle job and a slow network each raise
exactly one notice to the team and one Event per episode; steady work raises none."""

import datetime as dt

import pytest
from django.contrib.contenttypes.models import ContentType

from audit.models import Event, Notice
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, GpuRequest, Node
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_request
from telemetry.upkeep import telemetry_upkeep
from tests.telemetry.telemetry_helpers import plant, plant_network

NOW = dt.datetime(2025, 3, 1, 12, 0, 30, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.TELEMETRY_ROLLUP_LOOKBACK_S = 5 * 3600
    settings.TELEMETRY_IDLE_AFTER_S = 1800


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2)


@pytest.fixture
def run(member, team, node):
    """run(name, milli=500, cards=1, hours_ago=4) -> a running batch request on node-1, started that long
    ago (command="": an interactive one)."""

    def make(name="train", milli=500, cards=1, hours_ago=4, who=member, of=team, command="python train.py"):
        request = submit_request(
            user=who, team=of, name=name, gpu_milli=milli, num_gpus=cards, command=command
        )
        gpus = node.gpus.order_by("index")[:cards]
        allocate(request, [Slice(gpu.pk, milli, 4096) for gpu in gpus])
        transition_request(request, RequestState.RUNNING)
        started = NOW - dt.timedelta(hours=hours_ago)
        Allocation.objects.filter(request=request).update(started_at=started)
        GpuRequest.objects.filter(pk=request.pk).update(started_at=started)
        return request

    return make


def card(node, index=0):
    return node.gpus.get(index=index)


def findings(subject, kind):
    model = ContentType.objects.get_for_model(type(subject))
    return Event.objects.filter(content_type=model, object_id=subject.pk, to_state=kind)


def steady(node, minutes=240, util=60, memory=20_000):
    for index in range(2):
        plant(
            card(node, index),
            NOW - dt.timedelta(minutes=minutes),
            [util + k % 3 for k in range(minutes)],
            memory=memory,
        )


def test_steady_work_raises_no_notice(run, node):
    run()
    steady(node)

    result = telemetry_upkeep(NOW)

    assert result["notices"] == {}
    assert not Notice.objects.exists()


def test_a_jittery_job_gets_one_notice_and_one_event(run, node, team):
    job = run("jittery")
    # every 20 s for the last 20 minutes, util swings 20 ↔ 80: std-dev 30 %
    plant(card(node), NOW - dt.timedelta(minutes=20), [20 if k % 2 else 80 for k in range(60)], every_s=20)

    telemetry_upkeep(NOW)
    telemetry_upkeep(NOW + dt.timedelta(seconds=60))

    notice = Notice.objects.get()
    assert (notice.team, notice.kind, notice.key) == (team, "util_jitter", f"util_jitter:request:{job.pk}")
    assert notice.data["util_stddev_percent"] == {"GPU-node-1-0": 30.0}
    assert "jittery: GPU utilization varies by 30.0 %" in notice.text
    event = findings(job, "util_jitter").get()
    assert (event.team, event.actor_label, event.data["request_id"]) == (team, "telemetry checks", job.pk)


def test_a_leaking_job_gets_one_notice(run, node, team):
    job = run("leaky", hours_ago=3 + 1 / 6)  # judged from its 10th minute on: the last 3 hours
    # 3 hours, one sample a minute: memory climbs 10,000 → 11,790 MiB (about 18 %)
    plant(card(node), NOW - dt.timedelta(minutes=180), [60] * 180, memory=lambda k: 10_000 + 10 * k)

    telemetry_upkeep(NOW)
    telemetry_upkeep(NOW + dt.timedelta(seconds=60))

    notice = Notice.objects.get(kind="memory_leak")
    leak = notice.data["cards"]["GPU-node-1-0"]
    # head: the span's first 10 whole minutes (k = 1..10: 10,010..10,100), tail: the last 10 (11,700..11,790)
    assert (leak["from_mib"], leak["to_mib"]) == (10_055, 11_745)
    assert leak["growth_percent"] == round((11_745 - 10_055) / 10_055 * 100, 1)
    assert notice.team == team
    assert findings(job, "memory_leak").count() == 1
    assert Notice.objects.count() == 1  # util was steady


def test_memory_that_grows_under_five_percent_is_no_leak(run, node):
    run("fine", hours_ago=3 + 1 / 6)
    plant(card(node), NOW - dt.timedelta(minutes=180), [60] * 180, memory=lambda k: 10_000 + k)  # ~1.8 %

    telemetry_upkeep(NOW)

    assert not Notice.objects.exists()


def test_an_idle_job_is_noticed_once_per_episode(run, node, team):
    job = run("idle", hours_ago=2)
    plant(card(node), NOW - dt.timedelta(minutes=40), [k % 4 for k in range(40)])  # 0..3 %

    telemetry_upkeep(NOW)
    telemetry_upkeep(NOW + dt.timedelta(seconds=60))

    notice = Notice.objects.get()
    assert (notice.kind, notice.team) == ("idle", team)
    assert "under 5 % utilization for 30 min. Release it if it is done." in notice.text
    assert findings(job, "idle").count() == 1
    job.refresh_from_db()
    assert job.state == RequestState.RUNNING  # the team's policy does not release

    # busy again: the episode ends; idle again later: a new notice
    plant(card(node), NOW + dt.timedelta(seconds=90), [90])
    telemetry_upkeep(NOW + dt.timedelta(seconds=120))
    assert Notice.objects.get(kind="idle").resolved_at == NOW + dt.timedelta(seconds=120)
    later = NOW + dt.timedelta(minutes=40)
    plant(card(node), NOW + dt.timedelta(minutes=3), [1] * 38)
    telemetry_upkeep(later)
    assert Notice.objects.filter(kind="idle").count() == 2
    assert findings(job, "idle").count() == 2


def test_a_job_quiet_for_less_than_the_idle_time_is_not_idle(run, node):
    run("thinking", hours_ago=2)
    plant(card(node), NOW - dt.timedelta(minutes=40), [80] * 15 + [1] * 25)

    telemetry_upkeep(NOW)

    assert not Notice.objects.exists()


def test_a_team_whose_policy_releases_idle_work_gets_it_released(run, node, team):
    team.release_idle_allocations = True
    team.save()
    job = run("forgotten", hours_ago=2)
    neighbour = run("also-forgotten", hours_ago=2)  # the other half of card 0
    plant(card(node), NOW - dt.timedelta(minutes=40), [2] * 40)

    telemetry_upkeep(NOW)

    job.refresh_from_db()
    neighbour.refresh_from_db()
    assert (job.state, neighbour.state) == (RequestState.RELEASED, RequestState.RELEASED)
    assert not Allocation.objects.committed().filter(request=job).exists()
    ended = findings(job, RequestState.RELEASED).get()
    assert (ended.actor_label, ended.from_state) == ("idle policy", RequestState.RUNNING)
    assert "released under your team's policy" in ended.reason
    assert Notice.objects.filter(kind="idle").count() == 2  # both requests on the idle card


def test_a_slow_node_network_warns_each_team_running_there_once(run, node, team, other_team, outsider):
    run("ddp", milli=500)
    run("theirs", milli=500, who=outsider, of=other_team)
    steady(node)
    plant_network(node, NOW - dt.timedelta(minutes=5), [100_000_000] * 30)  # 100 MB/s

    telemetry_upkeep(NOW)
    telemetry_upkeep(NOW + dt.timedelta(seconds=30))

    notices = Notice.objects.filter(kind="network_slow").order_by("team__name")
    assert [n.team for n in notices] == sorted([team, other_team], key=lambda t: t.name)
    assert "moved 100 MB/s over the last 5 min, under the 500 MB/s floor" in notices[0].text
    assert findings(node, "network_slow").count() == 2
    assert set(findings(node, "network_slow").values_list("team", flat=True)) == {team.pk, other_team.pk}


def test_a_fast_node_network_or_one_without_readings_is_fine(run, node, make_node, settings):
    settings.TELEMETRY_NETWORK_FLOOR_BYTES_PER_S = 200_000_000
    run("ddp")
    steady(node)
    plant_network(node, NOW - dt.timedelta(minutes=5), [250_000_000] * 30)

    telemetry_upkeep(NOW)

    assert not Notice.objects.exists()
    assert Node.objects.count() == 1
