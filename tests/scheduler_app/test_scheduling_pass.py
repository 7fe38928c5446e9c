"""The database scheduling pass: the pure core's decisions applied to rows, under locks."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import CapacityType, NodeStatus, RequestState
from scheduler_app.models import Allocation, GpuRequest, TeamQuota
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool, set_node_status
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_requests
from scheduler_app.tasks import scheduling_pass
from teams.models import Team


@pytest.fixture
def submit(team, member):
    def make(name="job", **fields):
        values = {"name": name, "task_type": "training", "gpu_milli": 250} | fields
        return submit_request(user=member, team=team, **values)

    return make


def refreshed(request):
    request.refresh_from_db()
    return request


def test_pass_places_pending_request_and_logs_it(submit, make_node):
    make_node(gpus=2)
    request = submit(gpu_milli=500)

    result = run_scheduling_pass()

    request = refreshed(request)
    assert result.started == 1
    assert request.state == RequestState.SCHEDULED
    allocation = request.allocations.get()
    assert (allocation.milli, allocation.billing_mode, allocation.ended_at) == (500, "on-demand", None)
    assert allocation.gpu_memory_mib == 81920 // 2
    assert Event.objects.filter(
        object_id=request.pk, to_state="scheduled", reason__startswith="placed on node-1/gpu"
    )


def test_gang_gets_whole_cards_on_one_node(submit, make_node):
    make_node("node-1", gpus=2)
    make_node("node-2", gpus=4)
    gang = submit(gpu_milli=1000, num_gpus=4)

    run_scheduling_pass()

    nodes = set(refreshed(gang).allocations.values_list("gpu__node__name", flat=True))
    assert nodes == {"node-2"}
    assert gang.allocations.count() == 4


def test_request_that_cannot_fit_waits_with_reason_and_estimate(submit, make_node):
    make_node(gpus=1)
    long_job = submit("long", gpu_milli=1000, max_duration_s=3600)
    run_scheduling_pass()
    waiting = submit("waiting", gpu_milli=500)

    run_scheduling_pass()

    waiting = refreshed(waiting)
    assert waiting.state == RequestState.PENDING
    assert "0 requests ahead of you" in waiting.pending_reason
    started = refreshed(long_job).scheduled_at
    assert abs(waiting.estimated_start_at - (started + dt.timedelta(seconds=3600))) < dt.timedelta(seconds=5)


def test_request_no_node_could_hold_says_so(submit, make_node):
    make_node(gpus=2)
    impossible = submit(gpu_milli=1000, num_gpus=4)

    run_scheduling_pass()

    assert "4" in refreshed(impossible).pending_reason
    assert impossible.state == RequestState.PENDING


def test_on_demand_work_never_lands_on_spot_capacity(submit, make_node):
    spot = create_pool(name="spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    make_node("spot-node", pool=spot)
    request = submit(gpu_milli=250)

    run_scheduling_pass()

    assert refreshed(request).state == RequestState.PENDING


def test_spot_work_falls_back_to_on_demand_and_is_billed_so(submit, make_node):
    make_node("od-node")
    strict = submit("strict", billing_mode="spot", checkpoint_interval_s=600)
    fallback = submit(
        "fallback", billing_mode="spot", checkpoint_interval_s=600, allow_on_demand_fallback=True
    )

    run_scheduling_pass()

    assert refreshed(strict).state == RequestState.PENDING
    assert "no spot pool exists; allow on-demand fallback" in strict.pending_reason
    assert refreshed(fallback).state == RequestState.SCHEDULED
    assert fallback.allocations.get().billing_mode == "on-demand"


def test_pool_granularity_rounds_the_share_up(submit, make_node, pool):
    make_node()
    request = submit(gpu_milli=300, pool_name=pool.name)

    run_scheduling_pass()

    assert refreshed(request).allocations.get().milli == 375


def test_draining_node_gets_no_new_work(submit, make_node):
    set_node_status(make_node(), NodeStatus.DRAINING)
    request = submit()

    run_scheduling_pass()

    assert refreshed(request).state == RequestState.PENDING


def test_owner_reclaims_borrowed_capacity_from_work_not_started_yet_at_once(
    make_node, pool, member, outsider, team, other_team
):
    make_node(gpus=1)
    TeamQuota.objects.create(team=team, pool=pool, guaranteed_milli=1000)
    borrower = submit_request(
        user=outsider, team=other_team, name="borrower", task_type="training", gpu_milli=1000
    )
    run_scheduling_pass()
    assert refreshed(borrower).allocations.get().borrowed

    owner = submit_request(user=member, team=team, name="owner", task_type="training", gpu_milli=1000)
    result = run_scheduling_pass()

    assert result.preempted == 1
    borrower = refreshed(borrower)
    assert borrower.state == RequestState.PENDING  # scheduled, not started: nothing to checkpoint
    assert borrower.pending_reason.startswith("preempted: borrowed capacity reclaimed")
    assert borrower.allocations.get().ended_at is not None
    assert refreshed(owner).state == RequestState.SCHEDULED
    assert not owner.allocations.get().borrowed


def test_pass_query_count_does_not_grow_with_the_queue(submit, make_node):
    def queries_of_a_pass(cards: int, requests: int):
        pending = GpuRequest.objects.filter(state=RequestState.PENDING).values_list("pk", flat=True)
        transition_requests(pending, RequestState.CANCELLED, from_states=[RequestState.PENDING])
        run_scheduling_pass()  # the stored pass state exists from then on: both passes update it
        for n in range(cards // 2):
            make_node(f"node-{cards}-{n}", gpus=2)
        for i in range(requests):
            submit(f"r{cards}-{i}", gpu_milli=500)
        with CaptureQueriesContext(connection) as queries:
            result = run_scheduling_pass()
        return len(queries), result

    small, first = queries_of_a_pass(8, 40)
    large, second = queries_of_a_pass(16, 80)

    assert (first.started, first.waiting) == (16, 24)
    assert (second.started, second.waiting) == (32, 48)
    assert large == small


def test_pass_is_idempotent(submit, make_node):
    make_node(gpus=1)
    submit(gpu_milli=500)
    run_scheduling_pass()

    second = run_scheduling_pass()

    assert (second.started, second.preempted, second.conflicts) == (0, 0, 0)
    assert Allocation.objects.count() == 1


def test_celery_task_runs_a_pass(submit, make_node):
    make_node()
    request = submit()

    summary = scheduling_pass()

    assert summary["started"] == 1
    assert refreshed(request).state == RequestState.SCHEDULED


def test_scheduled_at_is_the_pass_time(submit, make_node):
    make_node()
    request = submit()
    when = timezone.now() + dt.timedelta(minutes=1)

    run_scheduling_pass(now=when)

    assert refreshed(request).scheduled_at == when
    assert request.allocations.get().started_at == when
    assert Team.objects.count() >= 1
    assert GpuRequest.objects.count() == 1


def test_estimate_says_where_it_would_run_and_writes_nothing(team, member, make_node):
    from scheduler_app.passes.estimates import estimate_request

    make_node(gpus=1)
    before = (GpuRequest.objects.count(), Event.objects.count())

    estimate = estimate_request(user=member, team=team, name="try", task_type="training", gpu_milli=500)

    assert estimate.starts_now and estimate.where == "node-1/gpu0"
    assert (GpuRequest.objects.count(), Event.objects.count()) == before


def test_estimate_gives_start_time_behind_running_work(submit, team, member, make_node):
    from scheduler_app.passes.estimates import estimate_request

    make_node(gpus=1)
    submit("long", gpu_milli=1000, max_duration_s=7200)
    run_scheduling_pass()

    estimate = estimate_request(user=member, team=team, name="try", task_type="training", gpu_milli=500)

    assert not estimate.starts_now
    assert estimate.estimated_start_at is not None
    assert (
        dt.timedelta(minutes=110) < estimate.estimated_start_at - timezone.now() < dt.timedelta(minutes=121)
    )
    assert "estimated start" in estimate.reason


def test_estimate_refuses_bad_input_like_submit(team, member, make_node):
    from django.core.exceptions import ValidationError

    from scheduler_app.passes.estimates import estimate_request

    with pytest.raises(ValidationError) as caught:
        estimate_request(user=member, team=team, name="try", task_type="training", gpu_milli=1500)
    assert "gpu_milli" in caught.value.message_dict


def test_pass_gives_the_policy_the_workload_mix_of_recent_requests(submit, make_node):
    from scheduler_app.passes.cluster_state import load_cluster_snapshot

    make_node()
    for _ in range(3):
        submit(gpu_milli=250)
    submit(gpu_milli=1000, num_gpus=2)

    workload = load_cluster_snapshot().workload

    assert workload.gangs, "multi-card shapes are remembered for the policy"
    assert workload.shapes


def test_passes_between_refreshes_explain_only_new_requests_and_each_interval_brings_all_up_to_date(
    submit, make_node, settings
):
    settings.SCHEDULER_INTERVAL_S = 10
    make_node(gpus=1)
    submit("long", gpu_milli=1000, max_duration_s=3600)
    t0 = timezone.now()
    run_scheduling_pass(now=t0)
    first = submit("first", gpu_milli=500)
    run_scheduling_pass(now=t0 + dt.timedelta(seconds=1))  # no full refresh yet: the first is new
    assert "0 requests ahead of you" in refreshed(first).pending_reason

    second = submit("second", gpu_milli=500, priority=10)  # goes ahead of the first
    run_scheduling_pass(now=t0 + dt.timedelta(seconds=2))

    assert "0 requests ahead of you" in refreshed(second).pending_reason  # new: explained at once
    assert "0 requests ahead of you" in refreshed(first).pending_reason  # not rewritten until due
    run_scheduling_pass(now=t0 + dt.timedelta(seconds=11))
    assert "1 request ahead of you" in refreshed(first).pending_reason


def test_a_deep_queue_counts_the_requests_ahead_to_two_figures():
    from scheduler_app.core.queueing import Waiting

    def ahead(n):
        return Waiting(1, "no GPU free", n).reason().split("; ")[1]

    assert [ahead(n) for n in (0, 1, 99, 100, 2913, 12345)] == [
        "0 requests ahead of you",
        "1 request ahead of you",
        "99 requests ahead of you",
        "about 100 requests ahead of you",
        "about 2,900 requests ahead of you",
        "about 12,000 requests ahead of you",
    ]


def test_the_pass_plans_and_writes_with_the_cyclic_collector_paused_not_while_it_waits_its_turn(
    submit, make_node, monkeypatch
):
    import gc

    from scheduler_app.passes import run

    make_node("n1")
    submit(gpu_milli=500)
    seen = {}
    waiter, planner = run._one_pass_at_a_time, run.plan_pass
    monkeypatch.setattr(
        run, "_one_pass_at_a_time", lambda: seen.setdefault("waiting", gc.isenabled()) and waiter()
    )
    monkeypatch.setattr(
        run, "plan_pass", lambda *a, **k: seen.setdefault("planning", gc.isenabled()) or planner(*a, **k)
    )
    was = gc.isenabled()
    gc.enable()
    try:
        assert run_scheduling_pass().started == 1
        assert seen == {"waiting": True, "planning": False} and gc.isenabled()
    finally:
        if not was:
            gc.disable()
