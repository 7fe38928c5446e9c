"""A big gang behind a steady stream of small jobs still starts (reservations + backfill)."""

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.placement import apply_placement, release_placement
from scheduler_app.core.queueing import QueueMode, RunningAllocation, plan_pass


def gang_start_time(mode: QueueMode, horizon_s: int = 6000) -> float | None:
    """Small 1-card jobs (300 s) arrive every 200 s on a 2-card node; a 2-card gang waits from t=1.

    Passes run every 50 s; jobs end exactly at their max duration. Returns when the gang starts.
    """
    node = NodeState("n1", "a100", 64_000, 512 * 1024, [GpuState(i, "A100", 81920) for i in range(2)])
    pending = {"gang": RequestSpec("gang", 1000, 2, team="ml", max_duration_s=600, submitted_at=1)}
    running: dict[str, RunningAllocation] = {}
    for now in range(0, horizon_s, 50):
        for rid, allocation in list(running.items()):
            if allocation.started_at + allocation.request.max_duration_s <= now:
                release_placement(node, allocation.request, allocation.placement)
                del running[rid]
        if now % 200 == 0:
            pending[f"s{now}"] = RequestSpec(f"s{now}", 1000, team="ml", max_duration_s=300, submitted_at=now)
        plan = plan_pass([node], list(pending.values()), list(running.values()), [], now, "first-fit", mode)
        for start in plan.starts:
            if start.request.id == "gang":
                return now
            apply_placement(node, start.request, start.placement)
            running[start.request.id] = RunningAllocation(start.request, start.placement, now)
            del pending[start.request.id]
    return None


def test_big_gang_eventually_starts_behind_a_stream_of_small_jobs():
    # given a stream of small jobs that always keeps at least one card busy
    # when a 2-card gang waits with the scheduler's reservations
    started_at = gang_start_time(QueueMode())
    # then it starts as soon as the cards running when it arrived are done
    assert started_at == 300


def test_without_reservations_the_gang_would_starve():
    # given the same stream, but no reservation protects the gang
    # when
    started_at = gang_start_time(QueueMode(reservation_depth=0))
    # then the small jobs keep slipping in front of it (the reason reservations exist)
    assert started_at is None
