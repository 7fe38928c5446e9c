"""Scheduler invariants under any stream of submits, releases, cancels and node losses."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState, RequestSpec
from scheduler_app.core.placement import apply_placement, release_placement
from scheduler_app.core.queueing import DEFAULT_POLICY, RunningAllocation, TeamQuota, plan_pass

TEAMS = ("ml", "data", "ops")
QUOTAS = [TeamQuota("ml", "on-demand", 2000), TeamQuota("data", "spot", 1000)]

requests = st.builds(
    lambda gpus, milli, memory, team, priority, duration, spot: RequestSpec(
        0,
        MILLI_PER_GPU if gpus > 1 else milli,
        gpus,
        gpu_memory_mib=memory,
        team=team,
        priority=priority,
        max_duration_s=duration,
        billing_mode="spot" if spot else "on-demand",
    ),
    gpus=st.integers(1, 3),
    milli=st.sampled_from([125, 250, 300, 500, 750, 1000]),
    memory=st.sampled_from([0, 0, 8192, 30000]),
    team=st.sampled_from(TEAMS),
    priority=st.integers(0, 2),
    duration=st.one_of(st.none(), st.integers(1, 500)),
    spot=st.booleans(),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), requests),
        st.tuples(st.just("submit"), requests),
        st.tuples(st.just("submit"), requests),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
        st.tuples(st.just("lose-node"), st.integers(0, 3)),
        st.tuples(st.just("wait"), st.integers(1, 300)),
    ),
    min_size=5,
    max_size=60,
)


def cluster():
    return [
        NodeState(f"n{i}", pool, 32_000, 256_000, [GpuState(g, "A100", 40960) for g in range(cards)])
        for i, (pool, cards) in enumerate([("on-demand", 2), ("on-demand", 4), ("spot", 2), ("spot", 1)])
    ]


class Driver:
    """Plays operations against plan_pass the way the database scheduler does."""

    def __init__(self, policy):
        self.policy = policy
        self.nodes = cluster()
        self.pending: dict[int, RequestSpec] = {}
        self.running: dict[int, RunningAllocation] = {}
        self.done: set[int] = set()
        self.accepted: set[int] = set()
        self.now = 0.0

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def apply(self, op, arg):
        if op == "submit":
            rid = len(self.accepted)
            self.pending[rid] = RequestSpec(**{**_fields(arg), "id": rid, "submitted_at": self.now})
            self.accepted.add(rid)
        elif op == "release" and self.running:
            rid = sorted(self.running)[arg % len(self.running)]
            allocation = self.running.pop(rid)
            release_placement(self.node(allocation.placement.node), allocation.request, allocation.placement)
            self.done.add(rid)
        elif op == "cancel" and self.pending:
            rid = sorted(self.pending)[arg % len(self.pending)]
            del self.pending[rid]
            self.done.add(rid)
        elif op == "lose-node" and self.nodes:
            lost = self.nodes.pop(arg % len(self.nodes))
            for rid in [r for r, a in self.running.items() if a.placement.node == lost.name]:
                self.pending[rid] = self.running.pop(rid).request
        elif op == "wait":
            self.now += arg
        self.schedule()

    def schedule(self):
        plan = plan_pass(
            self.nodes,
            list(self.pending.values()),
            list(self.running.values()),
            QUOTAS,
            self.now,
            self.policy,
        )
        started = [s.request.id for s in plan.starts]
        victims = [p.allocation.request.id for p in plan.preemptions]
        assert len(set(started)) == len(started) and set(started) <= set(self.pending)
        assert set(victims) <= set(self.running)
        assert sorted([*started, *(w.request_id for w in plan.waiting)]) == sorted(self.pending)
        for preemption in plan.preemptions:
            allocation = self.running.pop(preemption.allocation.request.id)
            release_placement(self.node(allocation.placement.node), allocation.request, allocation.placement)
            self.pending[allocation.request.id] = allocation.request
        for start in plan.starts:
            apply_placement(self.node(start.placement.node), start.request, start.placement)
            del self.pending[start.request.id]
            self.running[start.request.id] = RunningAllocation(
                start.request, start.placement, self.now, start.borrowed
            )

    def check(self):
        used: dict[tuple[str, int], list[int]] = {}
        for allocation in self.running.values():
            for index in allocation.placement.gpus:
                slot = used.setdefault((allocation.placement.node, index), [0, 0])
                slot[0] += allocation.placement.milli
                slot[1] += allocation.placement.gpu_memory_mib
        for node in self.nodes:
            for gpu in node.gpus:
                milli, memory = used.get((node.name, gpu.index), [0, 0])
                assert 0 <= milli <= MILLI_PER_GPU and 0 <= memory <= gpu.memory_mib
                assert gpu.free_milli == MILLI_PER_GPU - milli
                assert gpu.free_memory_mib == gpu.memory_mib - memory
        states = [set(self.pending), set(self.running), self.done]
        assert sum(len(s) for s in states) == len(self.accepted)
        assert set().union(*states) == self.accepted


def _fields(request):
    return {name: getattr(request, name) for name in RequestSpec.__slots__}


@settings(max_examples=200, deadline=None)
@given(ops=operations, policy=st.sampled_from(["first-fit", DEFAULT_POLICY]))
def test_no_gpu_is_overcommitted_and_no_request_is_lost_or_duplicated(ops, policy):
    # given a small mixed on-demand/spot cluster with quotas
    driver = Driver(policy)
    for op, arg in ops:
        # when any operation is followed by a scheduling pass
        driver.apply(op, arg)
        # then capacity holds and every accepted request is in exactly one state
        driver.check()
