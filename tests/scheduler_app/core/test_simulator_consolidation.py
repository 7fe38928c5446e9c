"""The simulator with consolidation: a whole card waiting on scattered halves gets its room at the moved
job's next checkpoint; the move is counted with the work it redoes."""

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.queueing import QueueMode
from scheduler_app.core.simulator import CHECKPOINT_S, MOVE_RESTART_S, simulate
from scheduler_app.core.workload import Job

LONG = 10 * 3600


def jobs() -> list[Job]:
    # a and b fill n0; c lands on n1; b ends at 100 s, leaving half a card free on each node; w, a
    # whole card, arrives at 200 s.
    def job(id_, milli, at, duration):
        return Job(RequestSpec(id_, milli, 1, team="ml", submitted_at=at), duration)

    return [job("a", 500, 0, LONG), job("b", 500, 1, 99), job("c", 500, 50, LONG), job("w", 1000, 200, 100)]


def run(consolidate: int):
    nodes = [NodeState(name, "p", 64_000, 10**6, [GpuState(0, "A100", 81_920)]) for name in ("n0", "n1")]
    return simulate(jobs(), nodes, QueueMode(), "first-fit", [], whole=False, consolidate=consolidate)


def test_the_waiting_whole_card_starts_at_the_moved_jobs_next_checkpoint():
    off, on = run(0), run(4)

    assert off.delay_by_request["w"] > LONG - 200 - 1  # behind a or c, ten hours
    assert on.delay_by_request["w"] == CHECKPOINT_S - 200  # a moves at its checkpoint at 600 s
    assert (off.moves, on.moves) == (0, 1)
    assert on.lost_to_moves == on.lost_work == MOVE_RESTART_S * 500
    moved = [r for r in on.runs if r.request_id == "a"]
    assert [(r.node, r.start, r.end) for r in moved] == [
        ("n0", 0, CHECKPOINT_S),
        ("n1", CHECKPOINT_S, LONG + MOVE_RESTART_S),
    ]
