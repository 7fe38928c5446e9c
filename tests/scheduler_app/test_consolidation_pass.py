"""Consolidation in the database pass: a request the scattered free share cannot hold waits for the
fewest moves, its room reserved; the jobs move at their next checkpoint through "checkpoint, then move";
a plan ends when it no longer holds; the bounds (pinned work, the pool's switch, once an hour, quotas)."""

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.models import Allocation, GpuRequest, RoomMove, RoomPlan, TeamQuota
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.rules.invariants import violations
from scheduler_app.services.agents import record_checkpoint, report_finished, report_started
from scheduler_app.services.inventory import create_pool, update_pool
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.quotas import set_team_quota
from scheduler_app.services.requests import cancel_request, submit_request
from tests.scheduler_app.test_migration_concurrency import race


@pytest.fixture
def nodes(make_node, team, pool):
    """Two nodes of one card each; the team is guaranteed both cards."""
    TeamQuota.objects.create(team=team, pool=pool, guaranteed_milli=2000)
    return make_node("n1", gpus=1), make_node("n2", gpus=1)


def running(node, milli, *, user, team, name, interval_s=600, pinned=False):
    """A job running on `node`'s card since its placement, checkpointing every `interval_s`."""
    request = submit_request(
        user=user,
        team=team,
        name=name,
        gpu_milli=milli,
        checkpoint_interval_s=interval_s,
        pinned=pinned,
        command="python train.py",
    )
    allocate(request, [Slice(node.gpus.get().pk, milli, 80 * 1024 * milli // 1000)])
    report_started(node, request.pk)
    request.refresh_from_db()
    return request


@pytest.fixture
def planned(nodes, member, team):
    """n1 runs big (half a card), n2 small (a quarter); whole asks a card: the pass plans small's move.
    Returns (n2, big, small, whole)."""
    n1, n2 = nodes
    big = running(n1, 500, user=member, team=team, name="big")
    small = running(n2, 250, user=member, team=team, name="small")
    whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)
    run_scheduling_pass()
    return n2, big, small, whole


def card_of(request) -> str:
    return Allocation.objects.committed().get(request=request).gpu.node.name


def refreshed(request) -> GpuRequest:
    request.refresh_from_db()
    return request


def test_a_whole_card_waits_for_one_move_and_starts_where_the_room_was_made(planned, member, team):
    n2, big, small, whole = planned

    plan = RoomPlan.objects.get()
    assert (plan.request, plan.node, plan.ended_at) == (whole, "n2", None)
    assert [m.request for m in plan.moves.all()] == [small]  # one move, the smaller job's
    whole = refreshed(whole)
    assert whole.pending_reason.startswith(
        f"waits for 1 running job ({small.pk}) to move at its next checkpoint, making room for it on n2"
    )
    assert whole.estimated_start_at == plan.ready_by

    # Meanwhile a quarter card submitted later backfills, but not into the room being made.
    quarter = submit_request(user=member, team=team, name="quarter", gpu_milli=250)
    run_scheduling_pass()
    assert card_of(quarter) == "n1"
    assert RoomPlan.objects.get().ended_at is None

    # The moved job checkpoints, is told to stop, and stops: requeued from its checkpoint.
    at = timezone.now()
    record_checkpoint(n2, small.pk, at, now=at)
    small = refreshed(small)
    assert small.state == RequestState.MIGRATING
    assert small.stop_reason == f"moved to make room for request {whole.pk} (whole)"
    report_finished(n2, small.pk, 143)
    assert refreshed(small).state == RequestState.PENDING
    assert RoomMove.objects.get().moved_at is not None

    run_scheduling_pass()

    assert card_of(whole) == "n2"
    assert card_of(small) == "n1"  # it goes on beside big, in the quarter card left there
    requeued = Event.objects.filter(object_id=small.pk, to_state=RequestState.PENDING).latest("id")
    assert requeued.reason.startswith(f"moved to make room for request {whole.pk} (whole); resumes from")
    assert requeued.data["work_lost_s"] <= 1
    run_scheduling_pass()
    assert RoomPlan.objects.get().outcome == "its request started"
    assert refreshed(big).state == RequestState.RUNNING
    assert violations() == []


def test_a_plan_is_dropped_when_its_job_finishes_first(planned):
    n2, _, small, whole = planned
    assert RoomPlan.objects.filter(ended_at__isnull=True).count() == 1

    report_finished(n2, small.pk, 0)  # it ends on its own before its next checkpoint
    run_scheduling_pass()

    plan = RoomPlan.objects.get()
    assert plan.outcome == f"request {small.pk} ended before it moved"
    assert plan.moves.get().moved_at is None
    assert card_of(whole) == "n2"  # the room its end left
    assert violations() == []


def test_a_plan_ends_when_its_request_leaves_the_queue_and_its_move_is_called_off(planned, member):
    n2, _, small, whole = planned

    cancel_request(whole, user=member)
    record_checkpoint(n2, small.pk, timezone.now())
    assert refreshed(small).state == RequestState.RUNNING  # no one waits for the room any more

    run_scheduling_pass()
    assert RoomPlan.objects.get().outcome == "its request left the queue"
    assert violations() == []


def test_no_plan_when_moves_cannot_help(nodes, member, team):
    n1, n2 = nodes
    running(n1, 750, user=member, team=team, name="a")
    running(n2, 750, user=member, team=team, name="b")
    whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)

    run_scheduling_pass()

    assert not RoomPlan.objects.exists()
    assert not refreshed(whole).pending_reason.startswith("waits for")


@pytest.mark.parametrize("bound", ["pinned", "no checkpoint interval", "pool switched off", "moved lately"])
def test_no_plan_moves_what_its_bounds_keep_in_place(nodes, member, team, operator, bound):
    n1, n2 = nodes
    running(n1, 500, user=member, team=team, name="big", pinned=True)
    options = {"pinned": bound == "pinned", "interval_s": None if bound == "no checkpoint interval" else 600}
    small = running(n2, 250, user=member, team=team, name="small", **options)
    if bound == "pool switched off":
        update_pool(n1.pool, actor=operator, consolidation=False)
    if bound == "moved lately":
        earlier = RoomPlan.objects.create(
            request=small, node="n1", gpus=[0], milli=250, gpu_memory_mib=1, ready_by=timezone.now()
        )
        earlier.moves.create(request=small, moved_at=timezone.now() - dt.timedelta(minutes=59))
        RoomPlan.objects.filter(pk=earlier.pk).update(ended_at=timezone.now())
    whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)

    run_scheduling_pass()

    assert not RoomPlan.objects.filter(request=whole).exists()


def test_no_job_within_its_quota_is_moved_to_a_pool_where_it_would_borrow(
    make_node, member, team, outsider, other_team, pool, operator
):
    b100 = create_pool(name="b100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    n1, n2 = make_node("n1", gpus=1), make_node("n2", gpus=1, pool=b100)
    set_team_quota(team=other_team, pool=pool, guaranteed_milli=500, actor=operator)
    running(n1, 500, user=outsider, team=other_team, name="theirs")  # within their quota on a100
    running(n2, 500, user=member, team=team, name="mine", pinned=True)
    whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)

    run_scheduling_pass()
    assert not RoomPlan.objects.exists()  # only "theirs" may move, and only to b100, beyond their quota

    set_team_quota(team=other_team, pool=b100, guaranteed_milli=500, actor=operator)
    run_scheduling_pass()
    assert RoomPlan.objects.get().request == whole
    assert RoomMove.objects.get().request.name == "theirs"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_move_racing_passes_and_a_cancel_leaves_one_consistent_plan(planned, member):
    """The moved job's checkpoint report, two passes and the waiting request's cancel, each on its own
    connection at once: the cluster keeps its invariants and the plan ends once, with its outcome."""
    n2, _, small, whole = planned
    outcomes = race(
        [
            lambda: record_checkpoint(n2, small.pk, timezone.now()),
            run_scheduling_pass,
            run_scheduling_pass,
            lambda: cancel_request(GpuRequest.objects.get(pk=whole.pk), user=member),
        ]
    )
    assert outcomes == ["ok"] * 4
    run_scheduling_pass()

    assert refreshed(whole).state == RequestState.CANCELLED
    plan = RoomPlan.objects.get()
    assert plan.ended_at is not None and plan.outcome == "its request left the queue"
    assert refreshed(small).state in (RequestState.RUNNING, RequestState.MIGRATING)
    assert violations() == []


def test_operators_read_the_plans_in_the_admin(planned, client, operator):
    client.force_login(operator)

    listed = client.get("/admin/scheduler_app/roomplan/")
    plan = client.get(f"/admin/scheduler_app/roomplan/{RoomPlan.objects.get().pk}/change/")

    assert listed.status_code == plan.status_code == 200
    assert "whole" in listed.text and "small" in plan.text


def test_no_plan_is_stored_for_a_request_cancelled_after_the_pass_read_it(nodes, member, team):
    from scheduler_app.core.cluster import Placement
    from scheduler_app.core.queueing import Room
    from scheduler_app.services.consolidation import record_rooms

    n2 = nodes[1]
    small = running(n2, 250, user=member, team=team, name="small")
    whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)
    cancel_request(whole, user=member)  # after the pass read it pending, before it stored its plans
    room = Room(whole.pk, (small.pk,), Placement(whole.pk, "n2", (0,), 1000, 1024), 0.0, True)

    record_rooms([room], [], timezone.now())

    assert not RoomPlan.objects.exists() and not RoomMove.objects.exists()
