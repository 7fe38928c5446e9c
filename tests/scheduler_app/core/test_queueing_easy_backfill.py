"""EASY backfill (Slurm's default), the baseline mode of the pure pass: one reservation, for the head."""

from scheduler_app.core.queueing import EASY_BACKFILL, STRICT_FIFO, plan_pass

from .test_queueing import node, request, running, started, waiting

POLICY = "first-fit"


def half_busy_node():
    """A 2-card node whose card 0 runs until t=100, and a 2-card gang first in line (it waits for t=100)."""
    nodes = [node(gpus=2)]
    busy = running(nodes, request("busy", max_duration_s=100), started_at=0)
    return nodes, busy, request("head", gpus=2, max_duration_s=600, submitted_at=1)


def test_head_gets_a_reservation_at_the_first_release_and_only_a_job_ending_before_it_backfills():
    # given a 2-card node whose card 0 runs until t=100, and a 2-card gang first in line
    nodes, busy, head = half_busy_node()
    pending = [
        head,
        request("too-long", max_duration_s=200, submitted_at=2),
        request("short", max_duration_s=50, submitted_at=3),
    ]
    # when
    plan = plan_pass(nodes, pending, [busy], [], now=10, policy=POLICY, mode=EASY_BACKFILL)
    # then the head is promised both cards at t=100; the job ending at 60 backfills card 1, the one
    # that would hold it until 210 (delaying the head) waits
    [reservation] = plan.reservations
    assert (reservation.request_id, reservation.node, reservation.gpus, reservation.start_at) == (
        "head",
        "n1",
        (0, 1),
        100,
    )
    assert started(plan) == ["short"]
    assert waiting(plan) == ["head", "too-long"]


def test_a_long_job_backfills_where_the_head_has_no_claim():
    # given the head's reservation lies on n1; n2 has a free card nobody reserved
    nodes = [node("n1", gpus=2), node("n2", gpus=1)]
    busy = running(nodes, request("busy", max_duration_s=100), node_name="n1", started_at=0)
    pending = [
        request("head", gpus=2, max_duration_s=600, submitted_at=1),
        request("long", max_duration_s=10_000, submitted_at=2),
    ]
    # when
    plan = plan_pass(nodes, pending, [busy], [], now=10, policy=POLICY, mode=EASY_BACKFILL)
    # then the long job starts at once, on n2 (first-fit would pick n1's free card, which the head claims)
    assert [(s.request.id, s.placement.node) for s in plan.starts] == [("long", "n2")]
    assert [r.request_id for r in plan.reservations] == ["head"]


def test_only_the_head_is_protected_so_a_later_job_may_delay_the_second_in_line():
    # given two blocked gangs on two 2-card nodes, each node half busy until t=100
    nodes = [node("n1", gpus=2), node("n2", gpus=2)]
    busy = [
        running(nodes, request("busy1", max_duration_s=100), node_name="n1", started_at=0),
        running(nodes, request("busy2", max_duration_s=100), node_name="n2", started_at=0),
    ]
    pending = [
        request("head", gpus=2, max_duration_s=600, submitted_at=1),
        request("second", gpus=2, max_duration_s=600, submitted_at=2),
        request("long", max_duration_s=10_000, submitted_at=3),
    ]
    # when
    plan = plan_pass(nodes, pending, busy, [], now=10, policy=POLICY, mode=EASY_BACKFILL)
    # then the head alone holds a reservation (n1), and the long job takes n2's free card although it
    # delays the second gang (a conservative scheduler would have reserved n2 for it)
    assert [(r.request_id, r.node) for r in plan.reservations] == [("head", "n1")]
    assert [(s.request.id, s.placement.node) for s in plan.starts] == [("long", "n2")]


def test_easy_backfill_is_submission_order_without_quotas_or_preemption():
    # given a borrowed-looking job of another team on the only card and an older request first in line
    nodes = [node()]
    holder = running(nodes, request("holder", team="data", max_duration_s=10_000), borrowed=True)
    pending = [request("old", team="big", submitted_at=0), request("new", team="small", submitted_at=5)]
    # when
    plan = plan_pass(nodes, pending, [holder], [], now=10, policy=POLICY, mode=EASY_BACKFILL)
    # then nothing is preempted and the queue is in submission order
    assert plan.preemptions == []
    assert waiting(plan) == ["old", "new"]


def test_strict_fifo_does_not_backfill_the_job_easy_backfill_starts():
    # given the first case's cluster and queue
    nodes, busy, head = half_busy_node()
    pending = [head, request("short", max_duration_s=50, submitted_at=3)]
    # when strict FIFO plans
    plan = plan_pass(nodes, pending, [busy], [], now=10, policy=POLICY, mode=STRICT_FIFO)
    # then the short job waits behind the head
    assert started(plan) == []
    assert waiting(plan) == ["head", "short"]
