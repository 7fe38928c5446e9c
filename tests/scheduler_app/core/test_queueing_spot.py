"""Spot work that accepts on-demand fallback runs on spot capacity while spot has room (pure pass)."""

import pytest

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.placement import DEFAULT_POLICY
from scheduler_app.core.queueing import TeamQuota, plan_pass

POOLS = frozenset({"a100", "a100-spot"})


def node(name, pool, capacity_type, gpus=1):
    cards = [GpuState(i, "A100", 81920) for i in range(gpus)]
    return NodeState(name, pool, 64_000, 512 * 1024, cards, capacity_type=capacity_type)


def spot_with_fallback(rid, milli=250, **kw):
    return RequestSpec(rid, milli, pools=POOLS, billing_mode="spot", allow_fallback=True, team="ml", **kw)


def cluster():
    """An on-demand node listed first (what a first-fit or a packing tie-break would take), a spot one."""
    return [node("a100-node-01", "a100", "on-demand"), node("a100-spot-node-02", "a100-spot", "spot")]


def where(plan) -> dict:
    return {s.request.id: s.placement.node for s in plan.starts}


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", DEFAULT_POLICY])
def test_spot_work_with_fallback_starts_on_free_spot_capacity_not_on_demand(policy):
    # given a free on-demand node and a free spot node
    # when a spot request that accepts on-demand fallback is planned
    plan = plan_pass(cluster(), [spot_with_fallback("r")], [], [], now=0.0, policy=policy)
    # then it runs on spot capacity
    assert where(plan) == {"r": "a100-spot-node-02"}


@pytest.mark.parametrize("policy", ["first-fit", DEFAULT_POLICY])
def test_spot_work_falls_back_to_on_demand_only_once_spot_has_no_room(policy):
    # given spot room for two half-card requests only
    nodes = cluster()
    pending = [spot_with_fallback(f"r{i}", milli=500, submitted_at=float(i)) for i in range(3)]
    # when they are planned together
    plan = plan_pass(nodes, pending, [], [], now=10.0, policy=policy)
    # then the first two fill the spot card and only the third falls back
    assert where(plan) == {"r0": "a100-spot-node-02", "r1": "a100-spot-node-02", "r2": "a100-node-01"}


def test_a_quota_on_on_demand_does_not_pull_spot_work_off_free_spot_capacity():
    # given the team's quota lies in the on-demand pool only
    quotas = [TeamQuota("ml", "a100", 1000)]
    # when its spot request with fallback is planned
    plan = plan_pass(cluster(), [spot_with_fallback("r")], [], quotas, now=0.0, policy=DEFAULT_POLICY)
    # then spot capacity still comes first
    assert where(plan) == {"r": "a100-spot-node-02"}


def test_spot_work_without_fallback_and_on_demand_work_keep_their_own_capacity():
    # given both kinds of nodes free
    on_demand = RequestSpec("od", 250, pools=frozenset({"a100"}), team="ml")
    spot_only = RequestSpec("sp", 250, pools=frozenset({"a100-spot"}), billing_mode="spot", team="ml")
    # when
    plan = plan_pass(cluster(), [on_demand, spot_only], [], [], now=0.0, policy=DEFAULT_POLICY)
    # then each runs where its pools say
    assert where(plan) == {"od": "a100-node-01", "sp": "a100-spot-node-02"}
