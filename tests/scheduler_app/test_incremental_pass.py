"""The pass after a few changes starts from the state the last pass stored: it must see exactly the
cluster a full load sees, so it decides exactly as a full pass would."""

import datetime as dt
import random

import pytest
from django.db.models import Max
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.core.queueing import plan_pass
from scheduler_app.models import GpuRequest, PassRecord
from scheduler_app.passes import stored_state
from scheduler_app.passes.cluster_state import load_cluster_snapshot
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.passes.stored_state import snapshot_since_last_pass
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.quotas import set_team_quota
from scheduler_app.services.requests import cancel_request, release_request, submit_request, validated_request
from scheduler_app.services.transitions import requeue, stop_gracefully
from teams.choices import Role
from teams.models import Membership
from tests.scheduler_app.test_estimate_is_the_pass import cluster, random_fields  # noqa: F401 (fixture)


def plan_of(snapshot, now):
    args = (snapshot.nodes, snapshot.pending, snapshot.running, snapshot.quotas, now.timestamp())
    return plan_pass(*args, workload=snapshot.workload)


def decides_as_a_full_pass():
    """The incremental snapshot (it must exist) equals a full load, and so does its plan; returns it."""
    now = timezone.now()
    incremental = snapshot_since_last_pass()
    assert incremental is not None, "the pass loaded the whole cluster"
    full = load_cluster_snapshot()
    assert incremental == full
    plan = plan_of(incremental, now)
    assert plan == plan_of(full, now)
    return plan


def job(team, gpus=1, milli=1000, duration=3600, name="job"):
    fields = {"task_type": "training", "gpu_milli": milli, "num_gpus": gpus, "max_duration_s": duration}
    return {"team": team, "name": name, **fields}


@pytest.mark.parametrize("seed", range(8))
def test_after_submits_cancels_and_ends_the_pass_sees_what_a_full_load_sees(cluster, member, seed):  # noqa: F811
    # Given a busy cluster after a pass, work of every shape running and waiting
    rng = random.Random(seed)
    submitted = [
        submit_request(user=member, **random_fields(rng, cluster)) for _ in range(rng.randint(30, 60))
    ]
    run_scheduling_pass()

    for _ in range(3):
        # When a few requests are submitted, a waiting one cancelled, a running one released
        for _ in range(rng.randint(1, 3)):
            submitted.append(submit_request(user=member, **random_fields(rng, cluster)))
        states = {r.pk: r.state for r in GpuRequest.objects.filter(pk__in=[r.pk for r in submitted])}
        pending = [r for r in submitted if states[r.pk] == RequestState.PENDING]
        running = [r for r in submitted if states[r.pk] == RequestState.SCHEDULED]
        if pending and rng.random() < 0.5:
            cancel_request(rng.choice(pending), user=member)
        if running and rng.random() < 0.5:
            release_request(GpuRequest.objects.get(pk=rng.choice(running).pk), user=member)

        # Then the next pass's incremental snapshot and plan are the full load's, and it runs on them
        decides_as_a_full_pass()
        run_scheduling_pass()


def test_a_submit_within_quota_reclaims_borrowed_capacity_as_a_full_pass_would(
    make_node, pool, team, other_team, member, operator
):
    # Given one node whose four cards run another team's borrowed work, and quota for the member's team
    make_node("od-0", gpus=4)
    Membership.objects.create(team=other_team, user=member, role=Role.MEMBER)
    set_team_quota(team=team, pool=pool, guaranteed_milli=2000, actor=operator)
    borrowed = [submit_request(user=member, **job(other_team, name=f"b{i}")) for i in range(4)]
    run_scheduling_pass()
    assert {r.state for r in GpuRequest.objects.filter(pk__in=[r.pk for r in borrowed])} == {"scheduled"}

    # When the quota's team submits one card's work
    mine = submit_request(user=member, **job(team, name="mine"))

    # Then the incremental pass plans the reclaim a full pass plans, and applies it
    plan = decides_as_a_full_pass()
    assert [s.request.id for s in plan.starts] == [mine.pk] and len(plan.preemptions) == 1
    assert run_scheduling_pass().preempted == 1
    mine.refresh_from_db()
    assert mine.state == RequestState.SCHEDULED


def test_a_short_submit_backfills_before_a_reservation_as_a_full_pass_would(make_node, team, member):
    # Given two of four cards busy for an hour and a four-card gang waiting on its reservation
    make_node("od-0", gpus=4)
    for i in range(2):
        submit_request(user=member, **job(team, name=f"long{i}"))
    run_scheduling_pass()
    gang = submit_request(user=member, **job(team, gpus=4, name="gang"))
    run_scheduling_pass()

    # When a short one-card job is submitted (it ends before the gang could start)
    short = submit_request(user=member, **job(team, duration=600, name="short"))

    # Then the incremental pass backfills it and keeps the gang waiting, as a full pass does
    plan = decides_as_a_full_pass()
    assert [s.request.id for s in plan.starts] == [short.pk]
    assert [w.request_id for w in plan.waiting] == [gang.pk]


def test_a_requeue_a_new_pool_or_a_lost_event_makes_the_pass_load_the_whole_cluster(make_node, team, member):
    # Given a pass that started one request
    make_node("od-0", gpus=4)
    started = submit_request(user=member, **job(team, name="started"))
    run_scheduling_pass()

    # When it is requeued, the pass cannot start from the stored state (it keeps its place by age)
    requeue([started.pk], reason="node lost", actor_name="test")
    assert snapshot_since_last_pass() is None
    run_scheduling_pass()

    # And when a pool is created (which logs no event), nor can it
    assert snapshot_since_last_pass() is not None
    create_pool(name="h100-spot", gpu_model="H100", capacity_type=CapacityType.SPOT)
    assert snapshot_since_last_pass() is None
    run_scheduling_pass()

    # And when a pending request's submit event is not seen (committed after a later one), nor can it
    assert snapshot_since_last_pass() is not None
    validated_request(user=member, **job(team, name="unseen")).save()
    assert snapshot_since_last_pass() is None


def test_while_work_checkpoints_before_it_stops_the_pass_loads_the_whole_cluster(make_node, team, member):
    # Given a running request being moved (its cards' deadline is read by the full load only)
    make_node("od-0", gpus=4)
    moving = submit_request(user=member, **job(team, gpus=4, name="moving"))
    run_scheduling_pass()
    GpuRequest.objects.filter(pk=moving.pk).update(state=RequestState.RUNNING, started_at=timezone.now())
    stop_gracefully([moving.pk], deadline=timezone.now() + dt.timedelta(minutes=2), actor_name="test")
    run_scheduling_pass()
    submit_request(user=member, **job(team, name="after"))

    # Then the next pass cannot start from the stored state, and waits for the cards instead of
    # planning a start the locked apply would refuse
    assert snapshot_since_last_pass() is None
    assert run_scheduling_pass().started == 0
    assert "to checkpoint and stop" in GpuRequest.objects.get(name="after").pending_reason


def test_the_next_pass_in_the_same_process_reuses_the_committed_state_without_unpickling(
    make_node, team, member, django_capture_on_commit_callbacks, monkeypatch
):
    # Given a pass whose transaction committed in this process
    make_node("od-0", gpus=4)
    submit_request(user=member, **job(team, gpus=4, name="gang"))
    with django_capture_on_commit_callbacks(execute=True):
        run_scheduling_pass()

    # When one more request is submitted, with unpickling made impossible
    def unreadable(blob):
        raise AssertionError("the stored state was unpickled again")

    monkeypatch.setattr(stored_state.pickle, "loads", unreadable)
    submit_request(user=member, **job(team, name="one-more"))

    # Then the next pass starts from the state kept in memory, and decides as a full pass would
    plan = decides_as_a_full_pass()
    assert [w.request_id for w in plan.waiting] and not plan.starts


def test_changes_committed_out_of_order_or_during_the_pass_are_replayed_once(make_node, team, member):
    # Given a pass, then changes whose events the stored pass counts as seen: writers commit out of
    # id order, and a change may commit while the pass runs, after it read the cluster
    make_node("od-0", gpus=2)
    running = submit_request(user=member, **job(team, milli=500, name="running"))
    waiting = submit_request(user=member, **job(team, gpus=2, name="waiting"))
    run_scheduling_pass()
    late = submit_request(user=member, **job(team, milli=250, name="late"))
    cancel_request(waiting, user=member)
    release_request(running, user=member)
    newest = Event.objects.aggregate(newest=Max("pk"))["newest"]
    PassRecord.objects.filter(pk=stored_state.RECORD_PK).update(last_event_id=newest)

    # Then the next pass still sees each of them, once: what a full load sees
    decides_as_a_full_pass()
    run_scheduling_pass()
    assert GpuRequest.objects.get(pk=late.pk).state == RequestState.SCHEDULED
    decides_as_a_full_pass()  # the same events read again change nothing
