"""Queueing rules of one pure scheduling pass (scheduler_app.core.queueing)."""

from scheduler_app.core.cluster import GpuState, NodeState, Placement, RequestSpec
from scheduler_app.core.placement import apply_placement
from scheduler_app.core.queueing import STRICT_FIFO, QueueMode, RunningAllocation, TeamQuota, plan_pass

POLICY = "first-fit"


def node(name="n1", gpus=1, pool="a100", memory_mib=81920):
    return NodeState(name, pool, 64_000, 512 * 1024, [GpuState(i, "A100", memory_mib) for i in range(gpus)])


def request(rid, milli=1000, gpus=1, team="ml", **kw):
    return RequestSpec(rid, milli, gpus, team=team, **kw)


def running(nodes, req, node_name="n1", cards=(0,), started_at=0.0, borrowed=False):
    """Take the request's resources on the node and describe the running allocation."""
    target = next(n for n in nodes if n.name == node_name)
    memory = req.memory_on(target.gpus[cards[0]])
    placement = Placement(req.id, node_name, tuple(cards), req.gpu_milli, memory)
    apply_placement(target, req, placement)
    return RunningAllocation(req, placement, started_at, borrowed)


def started(plan):
    return [s.request.id for s in plan.starts]


def waiting(plan):
    return [w.request_id for w in plan.waiting]


def test_within_quota_request_starts_before_an_older_borrowing_request():
    # given one free card, "ml" holds its quota there, "data" has none and asked first
    nodes = [node()]
    quotas = [TeamQuota("ml", "a100", 1000)]
    pending = [request("old", team="data", submitted_at=0), request("new", team="ml", submitted_at=50)]
    # when
    plan = plan_pass(nodes, pending, [], quotas, now=100, policy=POLICY)
    # then
    assert started(plan) == ["new"]
    assert plan.starts[0].borrowed is False
    assert waiting(plan) == ["old"]


def test_idle_capacity_is_borrowed_beyond_quota_and_marked_borrowed():
    # given a free card and a team without quota
    nodes = [node()]
    # when
    plan = plan_pass(nodes, [request("r", team="data")], [], [TeamQuota("ml", "a100", 1000)], 0, POLICY)
    # then
    assert started(plan) == ["r"]
    assert plan.starts[0].borrowed is True


def test_borrowed_allocation_is_reclaimed_when_quota_owner_needs_it_and_victim_is_requeued():
    # given "data" borrows the only card and "ml", which owns it by quota, asks for it
    nodes = [node()]
    borrower = running(nodes, request("borrower", team="data"), borrowed=True)
    # when
    plan = plan_pass(nodes, [request("owner")], [borrower], [TeamQuota("ml", "a100", 1000)], 100, POLICY)
    # then the borrower is preempted (returned for requeue, with a reason) and the owner starts
    assert [p.allocation.request.id for p in plan.preemptions] == ["borrower"]
    assert plan.preemptions[0].for_request_id == "owner"
    assert "reclaimed" in plan.preemptions[0].reason
    assert started(plan) == ["owner"]


def test_allocation_within_quota_is_never_preempted():
    # given "data" runs within its own quota on the only card
    nodes = [node()]
    holder = running(nodes, request("holder", team="data"), borrowed=False)
    quotas = [TeamQuota("ml", "a100", 1000), TeamQuota("data", "a100", 1000)]
    # when
    plan = plan_pass(nodes, [request("owner")], [holder], quotas, 100, POLICY)
    # then
    assert plan.preemptions == []
    assert waiting(plan) == ["owner"]


def test_reclaim_takes_fewest_victims_lowest_priority_youngest_first():
    # given two cards: card 0 holds two borrowed halves, card 1 one borrowed whole card
    nodes = [node(gpus=2)]
    halves = [
        running(nodes, request("half-old", 500, team="data", priority=0), started_at=0, borrowed=True),
        running(nodes, request("half-young", 500, team="data", priority=0), started_at=10, borrowed=True),
    ]
    whole = running(nodes, request("whole", team="data", priority=5), cards=(1,), borrowed=True)
    quotas = [TeamQuota("ml", "a100", 2000)]
    # when the owner needs half a card
    plan = plan_pass(nodes, [request("owner", 500)], [*halves, whole], quotas, 100, POLICY)
    # then one victim is enough: the youngest of the lowest priority
    assert [p.allocation.request.id for p in plan.preemptions] == ["half-young"]


def test_team_with_lower_dominant_share_goes_first():
    # given "big" already runs a card and asked first, "small" runs nothing
    nodes = [node(gpus=2)]
    busy = running(nodes, request("busy", team="big"))
    pending = [
        request("big-2", team="big", submitted_at=0),
        request("small-1", team="small", submitted_at=50),
    ]
    # when
    plan = plan_pass(nodes, pending, [busy], [], 100, POLICY)
    # then
    assert started(plan) == ["small-1"]


def test_fair_share_is_re_evaluated_after_each_start():
    # given two teams with two requests each and three free cards
    nodes = [node(gpus=3)]
    pending = [
        request("a1", team="a", submitted_at=0),
        request("a2", team="a", submitted_at=1),
        request("b1", team="b", submitted_at=2),
        request("b2", team="b", submitted_at=3),
    ]
    # when
    plan = plan_pass(nodes, pending, [], [], 10, POLICY)
    # then the teams alternate instead of "a" taking two cards first
    assert started(plan) == ["a1", "b1", "a2"]


def test_within_a_team_priority_goes_before_age():
    # given one free card and three requests of one team
    nodes = [node()]
    pending = [
        request("low-old", priority=0, submitted_at=0),
        request("high-new", priority=5, submitted_at=20),
        request("high-old", priority=5, submitted_at=10),
    ]
    # when
    plan = plan_pass(nodes, pending, [], [], 30, POLICY)
    # then
    assert started(plan) == ["high-old"]
    assert waiting(plan) == ["high-new", "low-old"]


def test_long_wait_raises_priority_so_low_priority_work_cannot_starve():
    # given a low-priority request that has waited 6 hours and a fresh priority-5 one
    nodes = [node()]
    pending = [
        request("patient", priority=0, submitted_at=0),
        request("urgent", priority=5, submitted_at=21_000),
    ]
    # when
    plan = plan_pass(nodes, pending, [], [], 21_600, POLICY, QueueMode(aging_s=3600))
    # then
    assert started(plan) == ["patient"]


def _blocked_gang_cluster():
    """Two cards: card 0 busy until t=1000; a 2-card gang waits (submitted first)."""
    nodes = [node(gpus=2)]
    busy = running(nodes, request("busy", team="x", max_duration_s=1000), started_at=0)
    gang = request("gang", 1000, gpus=2, submitted_at=0)
    return nodes, busy, gang


def test_small_job_backfills_when_it_ends_before_the_reservation():
    # given the gang has to wait for card 0 until t=1000
    nodes, busy, gang = _blocked_gang_cluster()
    short = request("short", max_duration_s=500, submitted_at=10)
    # when
    plan = plan_pass(nodes, [gang, short], [busy], [], 100, POLICY)
    # then the gang holds a reservation at 1000 and the short job uses card 1 meanwhile
    assert started(plan) == ["short"]
    assert [(r.request_id, r.start_at) for r in plan.reservations] == [("gang", 1000)]


def test_small_job_that_would_delay_the_reservation_does_not_start():
    # given the gang has to wait for card 0 until t=1000
    nodes, busy, gang = _blocked_gang_cluster()
    long = request("long", max_duration_s=5000, submitted_at=10)
    # when
    plan = plan_pass(nodes, [gang, long], [busy], [], 100, POLICY)
    # then
    assert started(plan) == []
    assert waiting(plan) == ["gang", "long"]
    assert "reserved for earlier requests (gang)" in plan.waiting[1].cause


def test_without_backfill_a_blocked_head_blocks_everything_behind_it():
    # given strict FIFO and the same blocked gang
    nodes, busy, gang = _blocked_gang_cluster()
    short = request("short", max_duration_s=500, submitted_at=10)
    # when
    plan = plan_pass(nodes, [gang, short], [busy], [], 100, POLICY, STRICT_FIFO)
    # then
    assert started(plan) == []
    assert "waiting behind request gang" in plan.waiting[1].cause


def test_gang_never_spans_nodes():
    # given two nodes with one free card each
    nodes = [node("n1", gpus=2), node("n2", gpus=2)]
    busy = [
        running(nodes, request("b1", team="x"), "n1", (0,)),
        running(nodes, request("b2", team="x"), "n2", (1,)),
    ]
    # when a 2-card gang asks
    plan = plan_pass(nodes, [request("gang", 1000, gpus=2)], busy, [], 0, POLICY)
    # then it waits for two cards on one node
    assert started(plan) == []
    assert plan.waiting[0].cause == "no node with 2 GPUs of 1000 milli-GPU free at once in any pool"


def test_estimated_start_comes_from_max_durations_of_running_work():
    # given the only card runs until 100 + 500 and two requests wait, the first 300 s long
    nodes = [node()]
    busy = running(nodes, request("busy", team="x", max_duration_s=500), started_at=100)
    pending = [request("first", max_duration_s=300, submitted_at=0), request("second", submitted_at=1)]
    # when
    plan = plan_pass(nodes, pending, [busy], [], 200, POLICY)
    # then
    assert [w.estimated_start for w in plan.waiting] == [600, 900]


def test_estimated_start_is_unknown_behind_work_without_max_duration():
    # given the only card runs a job that declared no max duration
    nodes = [node()]
    busy = running(nodes, request("busy", team="x"), started_at=0)
    # when
    plan = plan_pass(nodes, [request("r")], [busy], [], 10, POLICY)
    # then it still gets a (late) reservation but no promised time
    assert plan.waiting[0].estimated_start is None
    assert len(plan.reservations) == 1
    assert plan.waiting[0].reason().endswith("estimated start unknown")


def test_pending_reason_names_the_missing_slice_the_queue_and_the_estimate():
    # given a spot pool whose card runs until t=840 and three requests ahead
    nodes = [node(pool="spot-a100")]
    busy = running(nodes, request("busy", team="x", max_duration_s=840), started_at=0)
    ahead = [request(f"a{i}", 250, submitted_at=i, max_duration_s=60) for i in range(3)]
    mine = request("mine", 500, gpu_memory_mib=40960, pools=frozenset({"spot-a100"}), submitted_at=9)
    # when
    plan = plan_pass(nodes, [*ahead, mine], [busy], [], 100, POLICY)
    # then
    reason = plan.waiting[-1].reason(format_time=lambda t: f"t+{t:.0f}s")
    assert reason == (
        "no GPU with 500 milli-GPU and 40960 MiB free in pool spot-a100; 3 requests ahead of you; "
        "estimated start t+900s"
    )


def test_request_larger_than_any_node_says_so():
    # given nodes with one card
    nodes = [node()]
    # when
    plan = plan_pass(nodes, [request("huge", 1000, gpus=4)], [], [], 0, POLICY)
    # then
    assert plan.waiting[0].cause.startswith("no node in any pool can ever hold 4 GPU(s)")
    assert plan.waiting[0].estimated_start is None


def test_plan_pass_changes_none_of_its_inputs():
    # given
    nodes = [node(gpus=2)]
    before = repr(nodes)
    # when
    plan_pass(nodes, [request("r"), request("g", gpus=2)], [], [], 0, POLICY)
    # then
    assert repr(nodes) == before


def test_a_pass_that_reclaims_changes_none_of_its_inputs():
    # given "data" borrows the only card, which "ml" owns by quota
    nodes = [node()]
    borrower = running(nodes, request("borrower", team="data"), borrowed=True)
    before = repr(nodes)
    # when ml's request reclaims it
    plan = plan_pass(nodes, [request("owner")], [borrower], [TeamQuota("ml", "a100", 1000)], 100, POLICY)
    # then the pass evicted and started on its own copy: the caller's nodes still hold the borrower
    assert [p.allocation.request.id for p in plan.preemptions] == ["borrower"]
    assert started(plan) == ["owner"]
    assert repr(nodes) == before


def test_later_requests_of_a_pass_see_the_slices_its_earlier_starts_took():
    # given one card and three half-card requests, under the default policy's engine
    nodes = [node()]
    before = repr(nodes)
    # when
    plan = plan_pass(nodes, [request(f"half-{i}", milli=500) for i in range(3)], [], [], 0, "fgd-plus")
    # then two share the card and the third waits; the caller's card is still free
    assert started(plan) == ["half-0", "half-1"]
    assert [s.placement.gpus for s in plan.starts] == [(0,), (0,)]
    assert waiting(plan) == ["half-2"]
    assert repr(nodes) == before
