"""The estimate is the next scheduling pass's own decision: same node and cards, or the same wait."""

import random

import pytest
from django.utils import timezone

from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.estimates import estimate_request
from scheduler_app.models import Allocation, GpuRequest, PassRecord
from scheduler_app.scheduling import run_scheduling_pass
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
