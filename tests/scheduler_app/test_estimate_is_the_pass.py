"""The estimate is the next scheduling pass's own decision: same node and cards, or the same wait."""

import dataclasses
import pickle
import random

import pytest
from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.core.cluster import GpuState, NodeState, Placement, RequestSpec
from scheduler_app.core.next_pass import NextPass, PassState, _run_to_turn, after_pass, replay
from scheduler_app.core.placement import apply_placement
from scheduler_app.core.queue_order import queue_key, reorder_at
from scheduler_app.core.queueing import RunningAllocation, TeamQuota, plan_pass
from scheduler_app.models import Allocation, GpuRequest, PassRecord
from scheduler_app.passes.estimates import estimate_request
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.quotas import set_team_quota
from scheduler_app.services.requests import cancel_request, release_request, submit_request
from teams.choices import Role
from teams.models import Membership, Team

SHARES = [125, 250, 375, 500, 750, 1000]


@pytest.fixture
def cluster(make_node, pool, member, operator):
    """Three pools (A100 on-demand, A100 spot, H100 on-demand), three teams, one with quotas."""
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    h100 = create_pool(name="h100", gpu_model="H100", capacity_type=CapacityType.ON_DEMAND)
    for i in range(3):
        make_node(f"od-{i}", gpus=4)
    make_node("od-big", gpus=8)
    make_node("spot-0", gpus=4, pool=spot)
    make_node("spot-1", gpus=2, pool=spot)
    make_node("h100-0", gpus=4, pool=h100, memory_mib=40960)
    teams = []
    for slug in ("vision", "language", "speech"):
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": slug.title()})
        Membership.objects.get_or_create(team=team, user=member, defaults={"role": Role.MEMBER})
        teams.append(team)
    set_team_quota(team=teams[1], pool=pool, guaranteed_milli=4000, actor=operator)
    return teams


def random_fields(rng: random.Random, teams) -> dict:
    """A request of a random shape: fractions, gangs, spot with or without fallback, pools, models."""
    share = rng.choice(SHARES)
    fields = {
        "team": rng.choice(teams),
        "name": "job",
        "task_type": rng.choice(["training", "inference"]),
        "gpu_milli": share,
        "num_gpus": 1,
        "priority": rng.choice([0, 0, 0, 5, -5]),
        "max_duration_s": rng.choice([None, 1800, 3600, 7200, 14400]),
    }
    if share == 1000 and rng.random() < 0.5:
        fields["num_gpus"] = rng.choice([2, 4, 8])
    kind = rng.random()
    if kind < 0.25:
        fields |= {"billing_mode": "spot", "checkpoint_interval_s": 600}
        fields["allow_on_demand_fallback"] = rng.random() < 0.5
    elif kind < 0.35:
        fields["pool_name"] = rng.choice(["a100", "h100"])
    elif kind < 0.45:
        fields["gpu_model"] = rng.choice(["A100-80GB", "H100"])
    return fields


def what_the_pass_did(request: GpuRequest) -> tuple:
    request.refresh_from_db()
    if request.state == RequestState.SCHEDULED:
        pieces = Allocation.objects.filter(request=request).select_related("gpu__node").order_by("gpu__index")
        return ("starts", ", ".join(f"{p.gpu.node.name}/gpu{p.gpu.index}" for p in pieces))
    return ("waits", request.pending_reason, request.estimated_start_at)


def what_the_estimate_said(estimate, request: GpuRequest) -> tuple:
    """The estimate; a reason may name the request's own reservation, which has its id once submitted."""
    if estimate.starts_now:
        return ("starts", estimate.where)
    return ("waits", estimate.reason.replace("this request", str(request.pk)), estimate.estimated_start_at)


@pytest.mark.parametrize("seed", range(15))
def test_the_estimate_is_what_the_next_pass_does_with_the_request(cluster, member, seed):
    # Given a cluster after a pass, with work of every shape running and waiting, and a few changes since
    rng = random.Random(seed)
    submitted = [
        submit_request(user=member, **random_fields(rng, cluster)) for _ in range(rng.randint(30, 70))
    ]
    run_scheduling_pass(now=timezone.now())
    later = [submit_request(user=member, **random_fields(rng, cluster)) for _ in range(rng.randint(0, 3))]
    pending = [r for r in submitted if GpuRequest.objects.get(pk=r.pk).state == RequestState.PENDING]
    if pending and rng.random() < 0.5:
        cancel_request(rng.choice(pending), user=member)
    running = [r for r in submitted if GpuRequest.objects.get(pk=r.pk).state == RequestState.SCHEDULED]
    if running and rng.random() < 0.5:
        release_request(GpuRequest.objects.get(pk=rng.choice(running).pk), user=member)
    assert PassRecord.objects.exists() and later is not None

    # When a candidate is estimated, then submitted and the next pass runs
    for _ in range(3):
        fields = random_fields(rng, cluster)
        now = timezone.now()
        estimate = estimate_request(user=member, now=now, **fields)
        candidate = submit_request(user=member, **fields)
        run_scheduling_pass(now=now)

        # Then the pass did with it what the estimate said
        assert what_the_estimate_said(estimate, candidate) == what_the_pass_did(candidate), (seed, fields)


@pytest.mark.parametrize("seed", range(4))
def test_one_stored_pass_serves_many_estimates_and_sees_the_changes_since(cluster, member, seed):
    # Given a cluster after a pass
    rng = random.Random(100 + seed)
    for _ in range(rng.randint(30, 60)):
        submit_request(user=member, **random_fields(rng, cluster))
    run_scheduling_pass(now=timezone.now())

    # When several candidates are estimated on that one state
    now = timezone.now()
    asked = [random_fields(rng, cluster) for _ in range(6)]
    estimates = [estimate_request(user=member, now=now, **fields) for fields in asked]

    # Then each is what the pass does with it (each submitted alone, then undone)
    for fields, estimate in zip(asked, estimates, strict=True):
        with transaction.atomic():
            candidate = submit_request(user=member, **fields)
            run_scheduling_pass(now=now)
            assert what_the_estimate_said(estimate, candidate) == what_the_pass_did(candidate), fields
            transaction.set_rollback(True)

    # And after one more submit, the next estimate counts it (asked after that submit: a candidate asked
    # before it would be older than it, so ahead of it in its team's line)
    submit_request(user=member, **random_fields(rng, cluster))
    fields = random_fields(rng, cluster)
    now = timezone.now()
    estimate = estimate_request(user=member, now=now, **fields)
    candidate = submit_request(user=member, **fields)
    run_scheduling_pass(now=now)
    assert what_the_estimate_said(estimate, candidate) == what_the_pass_did(candidate), fields


@pytest.mark.parametrize(("team_slug", "starts"), [("speech", True), ("vision", False)])
def test_the_estimate_follows_fair_share_ahead_of_another_teams_queue(
    make_node, team, member, operator, team_slug, starts
):
    # Given vision holds the node and its next request waits with a reservation on the half-used card
    make_node("node-1", gpus=2)
    speech = Team.objects.create(name="Speech", slug="speech")
    Membership.objects.create(team=speech, user=member, role=Role.MEMBER)
    for milli, hours in ((1000, 2), (500, 1)):
        submit_request(user=member, team=team, name="held", gpu_milli=milli, max_duration_s=hours * 3600)
    run_scheduling_pass(now=timezone.now())
    submit_request(user=member, team=team, name="next", gpu_milli=1000, max_duration_s=3600)
    run_scheduling_pass(now=timezone.now())

    # When a half card with no end in sight is estimated, then submitted and scheduled
    fields = {"team": Team.objects.get(slug=team_slug), "name": "c", "gpu_milli": 500}
    now = timezone.now()
    estimate = estimate_request(user=member, now=now, **fields)
    candidate = submit_request(user=member, **fields)
    run_scheduling_pass(now=now)

    # Then speech, with no share yet, goes before vision's waiting request and takes the free half;
    # vision's own candidate queues behind it and may not delay its reservation
    assert estimate.starts_now is starts
    assert what_the_estimate_said(estimate, candidate) == what_the_pass_did(candidate)


# The fast path (turns planned once per state, each candidate judged at its own turn) against the pass's
# own loop run with the candidate added up to its turn, on pure states: many candidates on one plan, at
# later times (a release or an aging boundary in between), after submits, cancels and ends.

TEAMS = ("vision", "language", "speech")
HOUR = 3600.0


def pure_request(rng: random.Random, rid, at: float) -> RequestSpec:
    share = rng.choice([250, 500, 1000])
    gpus = rng.choice([2, 4]) if share == 1000 and rng.random() < 0.3 else 1
    return RequestSpec(
        rid,
        share,
        gpus,
        cpu_milli=1000,
        memory_mib=4096,
        pools=rng.choice([frozenset(), frozenset({"od"}), frozenset({"spot"})]),
        priority=rng.choice([0, 0, 1, 5, -5]),
        team=rng.choice(TEAMS),
        max_duration_s=rng.choice([None, 600, 3600, 4 * 3600]),
        billing_mode=rng.choice(["on-demand", "spot"]),
        submitted_at=at,
    )


def cards(count: int) -> list[GpuState]:
    return [GpuState(g, "A100", 81920) for g in range(count)]


def pure_state(rng: random.Random, now: float, overdue: bool = True) -> PassState:
    """A pass's post-plan state: a busy cluster (overdue: some work past its max duration), a long queue."""
    nodes = [
        NodeState(
            f"n{i}",
            "spot" if i % 3 == 2 else "od",
            64_000,
            512 * 1024,
            [GpuState(g, "A100", 81920) for g in range(4)],
        )
        for i in range(6)
    ]
    running = []
    for i, node in enumerate(nodes):
        for g in range(4):
            req = dataclasses.replace(
                pure_request(rng, f"r{i}-{g}", now - 5 * HOUR), num_gpus=1, gpu_milli=750
            )
            placement = Placement(req.id, node.name, (g,), 750, req.memory_on(node.gpus[g]))
            apply_placement(node, req, placement)
            started = now - (rng.choice([0.5, 2, 6]) * HOUR if overdue else rng.uniform(0, 500))
            running.append(RunningAllocation(req, placement, started, borrowed=rng.random() < 0.2))
    pending = [pure_request(rng, i, now - rng.uniform(0, 3 * HOUR)) for i in range(rng.randint(10, 40))]
    quotas = [TeamQuota("language", "od", 4000), TeamQuota("vision", "spot", 1000)]
    plan = plan_pass(nodes, pending, running, quotas, now, "first-fit")
    return after_pass(nodes, pending, running, quotas, pending[:10], plan, now, "first-fit", 10)


@pytest.mark.parametrize("seed", range(40))
def test_the_planned_turns_give_what_running_the_pass_to_the_candidates_turn_gives(seed):
    rng = random.Random(seed)
    now = 1_000_000.0
    state = pure_state(rng, now, overdue=seed % 2 == 0)
    if seed % 4 == 1:
        state = replay(state, [pure_request(rng, f"new{i}", now + 1) for i in range(2)])
    elif seed % 4 == 2:
        state = replay(state, withdrawn=[state.waiting[0].id] if state.waiting else [])
    elif seed % 4 == 3:
        state = replay(state, ended=[state.running[0].request.id])
    planned = NextPass(state)
    for later in (2.0, 2.0, 1900.0, 2 * HOUR + 7):  # the same instant again, then past releases
        for k in range(6):
            candidate = pure_request(rng, "this request", now + later)
            assert planned.place(candidate, now + later) == _run_to_turn(state, candidate, now + later), (
                seed,
                later,
                k,
            )


def test_replaying_changes_leaves_the_stored_state_as_it_was():
    rng = random.Random(7)
    state = pure_state(rng, 1_000_000.0)
    before = pickle.dumps(state)
    replay(
        state, [pure_request(rng, "new", 1_000_001.0)], [state.waiting[0].id], [state.running[0].request.id]
    )
    assert pickle.dumps(state) == before


def test_aging_reorders_a_line_when_an_older_low_priority_request_overtakes_a_newer_high_one():
    old = RequestSpec(1, 500, priority=0, submitted_at=0.0)
    new = RequestSpec(2, 500, priority=1, submitted_at=1000.0)
    line = sorted([old, new], key=lambda r: queue_key(r, 1500.0, HOUR))
    assert line == [new, old]
    assert reorder_at(line, 1500.0, HOUR) == HOUR  # old reaches priority 1 too, and is older
    assert reorder_at([old, RequestSpec(3, 500, submitted_at=9.0)], 1500.0, HOUR) == float("inf")


def test_a_reservation_due_now_counts_from_each_estimates_now():
    # Given one card held past its max duration, and four hour-long requests waiting for it
    now = 1_000_000.0
    node = NodeState("n0", "od", 64_000, 512 * 1024, cards(1))
    held = RequestSpec("held", 1000, max_duration_s=600, team="ml")
    placement = Placement("held", "n0", (0,), 1000, 81920)
    apply_placement(node, held, placement)
    running = [RunningAllocation(held, placement, now - HOUR)]
    waiting = [
        RequestSpec(i, 1000, max_duration_s=3600, team="ml", submitted_at=now - 9 + i) for i in range(4)
    ]
    plan = plan_pass([node], waiting, running, [], now, "first-fit")
    planned = NextPass(after_pass([node], waiting, running, [], [], plan, now, "first-fit", 10))

    # When a fifth is estimated, then another a minute later
    for later in (now + 1, now + 61):
        candidate = RequestSpec("this request", 1000, max_duration_s=3600, team="ml", submitted_at=later)

        # Then the first request's reservation starts at that estimate's now, and the queue behind it with it
        expected = _run_to_turn(planned.state, candidate, later)
        assert planned.place(candidate, later) == expected
        assert expected.waiting.estimated_start == later + 4 * 3600


def test_a_stored_state_this_code_cannot_read_falls_back_to_the_full_dry_run(team, member, make_node, caplog):
    make_node(gpus=1)
    run_scheduling_pass()
    PassRecord.objects.update(state=b"left by another version of the code")

    estimate = estimate_request(user=member, team=team, name="probe", gpu_milli=250)

    assert estimate.starts_now
    assert estimate.where == "node-1/gpu0"
    assert "the stored pass state cannot be read" in caplog.text
