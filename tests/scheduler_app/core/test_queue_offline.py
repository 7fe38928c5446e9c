"""A request only offline nodes could hold waits saying which and why (scheduler_app.core.queue_text),
not that no node can ever hold it."""

import pickle

from scheduler_app.core.cluster import GpuState, NodeState, OfflineNode, RequestSpec
from scheduler_app.core.next_pass import NextPass, _run_to_turn, after_pass
from scheduler_app.core.queueing import plan_pass

POLICY = "first-fit"
SINCE = "2025-01-07 23:11 UTC"


def node(name, pool="a100", gpus=1, memory_mib=81920):
    return NodeState(name, pool, 64_000, 512 * 1024, [GpuState(i, "A100", memory_mib) for i in range(gpus)])


def offline(name, status, pool="a100", since=SINCE, gpus=1):
    return OfflineNode(node(name, pool, gpus), status, since)


def cause(nodes, out, *requests):
    """The cause the pass gives the last of `requests`."""
    plan = plan_pass(nodes, list(requests), [], [], 0, POLICY, offline=out)
    return plan.waiting[-1].cause


def test_a_request_only_lost_nodes_could_hold_says_they_are_offline_and_since_when():
    out = [offline(f"a100-{i}", "lost") for i in range(3)]

    assert (
        cause([], out, RequestSpec("r", 500)) == f"the 3 nodes of pool a100 are offline (lost since {SINCE})"
    )


def test_draining_and_reclaimed_pools_say_so():
    draining = [offline(f"d-{i}", "draining", pool="a100") for i in range(2)]
    reclaimed = [offline(f"s-{i}", "reclaimed", pool="a100-spot") for i in range(2)]

    assert (
        cause([], draining, RequestSpec("r", 500)) == f"the 2 nodes of pool a100 are draining (since {SINCE})"
    )
    assert cause([], reclaimed, RequestSpec("r", 500)) == (
        f"the 2 nodes of pool a100-spot are reclaimed (since {SINCE})"
    )


def test_a_pool_out_for_several_reasons_counts_each():
    out = [
        offline("a-1", "lost"),
        offline("a-2", "lost"),
        offline("a-3", "draining", since="2025-01-07 22:40 UTC"),
        offline("a-4", "suspect", since=""),
    ]

    assert cause([], out, RequestSpec("r", 500)) == (
        "the 4 nodes of pool a100 are out of service "
        f"(1 draining since 2025-01-07 22:40 UTC, 2 lost since {SINCE}, 1 missing heartbeats)"
    )


def test_only_the_offline_nodes_that_could_hold_it_are_named_one_by_name():
    # given a ready node too small for two cards, and offline nodes of two pools, one of them too small
    ready = [node("small-ready", gpus=1)]
    out = [
        offline("big-1", "lost", gpus=2),
        offline("small-1", "lost"),
        offline("h-1", "draining", pool="h100", gpus=2),
    ]

    reason = cause(ready, out, RequestSpec("r", 1000, 2))

    assert reason == (
        f"node big-1 of pool a100 is offline (lost since {SINCE}) "
        f"and node h-1 of pool h100 is draining (since {SINCE})"
    )


def test_some_of_a_pools_nodes_offline_say_that_could_hold_it():
    ready = [node("a-ready", gpus=1)]
    out = [offline("a-big-1", "lost", gpus=4), offline("a-big-2", "lost", gpus=4)]

    assert cause(ready, out, RequestSpec("r", 1000, 4)) == (
        f"the 2 nodes of pool a100 that could hold it are offline (lost since {SINCE})"
    )


def test_a_request_no_node_of_any_state_could_hold_can_never_be_held():
    out = [offline("a-1", "lost", gpus=2)]

    assert cause([node("a-2", gpus=2)], out, RequestSpec("r", 1000, 4)) == (
        "no node in any pool can ever hold 4 GPU(s) of 1000 milli-GPU"
    )


def test_offline_nodes_of_pools_the_request_may_not_use_do_not_count():
    out = [offline("spot-1", "reclaimed", pool="a100-spot")]

    assert cause([], out, RequestSpec("r", 500, pools=frozenset({"a100"}))) == (
        "no node in pool a100 can ever hold 1 GPU(s) of 500 milli-GPU"
    )


def test_a_request_waiting_on_offline_nodes_gets_no_reservation_nor_start_estimate():
    plan = plan_pass([], [RequestSpec("r", 500)], [], [], 0, POLICY, offline=[offline("a-1", "lost")])

    assert plan.reservations == [] and plan.waiting[0].estimated_start is None
    assert plan.waiting[0].reason() == (
        f"node a-1 of pool a100 is offline (lost since {SINCE}); "
        "0 requests ahead of you; estimated start unknown"
    )


def test_the_stored_pass_state_keeps_the_offline_nodes_for_the_next_pass_and_its_estimates():
    # given a pass that left one request waiting on a lost node, its state stored and read back
    out, waiting = [offline("a-1", "lost")], [RequestSpec(1, 500)]
    plan = plan_pass([], waiting, [], [], 0, POLICY, offline=out)
    stored = after_pass([], waiting, [], [], [], plan, 0, POLICY, 10, offline=out)
    state = pickle.loads(pickle.dumps(stored))
    candidate = RequestSpec("this request", 500, submitted_at=1)

    decision = NextPass(state).place(candidate, 1)

    assert state.offline == tuple(out)
    assert decision == _run_to_turn(state, candidate, 1)
    assert decision.waiting.cause == f"node a-1 of pool a100 is offline (lost since {SINCE})"
