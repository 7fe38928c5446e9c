"""Where the next scheduling pass would put one more request: the pass's own rules on the state it left.

`after_pass` turns a pass's inputs and plan into the state the next pass will load
(absent changes in between); `replay` applies the few changes made since;
`place_candidate` runs the pass's queue, placement, backfill and reservation
code on that state with the candidate added, and stops at the candidate's turn.

Requests ahead of the candidate in queue order (fair share across teams, then
priority and age, exactly as `FairQueue` ranks them, re-ranked after each start)
are planned by the pass's own code, with one shortcut that is the only
approximation: a request the stored pass found no room for, with nothing freed
or withdrawn since, is taken to wait again without being tried (it only places
its reservation, if it is among the first). That can differ from the pass only
where re-ranking lets such a request reach a card that another team's
reservation kept from it in the stored pass.
Units: milli-GPU, MiB, seconds on the caller's epoch; pure (no ORM, no clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .cluster import NodeState, RequestSpec
from .fragmentation import WorkloadMix
from .placement import apply_placement, release_placement
from .queue_ledger import TeamQuota
from .queue_reservations import copy_node
from .queueing import PassPlan, QueueMode, RunningAllocation, Start, Waiting, _Pass


@dataclass(slots=True)
class PassState:
    """The cluster as a pass left it: what the next pass loads if nothing changes in between.

    at: when the pass ran (s). waiting: requests still pending that some pool may
    take. tried: the ids of those the pass found no room for, with nothing freed
    since. recent: the newest requests first, whose shapes make the workload mix.
    """

    at: float
    policy: str
    nodes: list[NodeState]
    running: list[RunningAllocation]
    waiting: list[RequestSpec]
    tried: frozenset[int | str]
    quotas: list[TeamQuota]
    recent: list[RequestSpec]
    window: int


def after_pass(
    nodes: Sequence[NodeState],
    pending: Sequence[RequestSpec],
    running: Sequence[RunningAllocation],
    quotas: Sequence[TeamQuota],
    recent: Sequence[RequestSpec],
    plan: PassPlan,
    now: float,
    policy: str,
    window: int,
) -> PassState:
    """Apply a plan to its inputs: starts run from `now`, preempted work is pending again."""
    copies = [copy_node(n) for n in nodes]
    by_name = {n.name: n for n in copies}
    evicted = {p.allocation.request.id for p in plan.preemptions}
    for preemption in plan.preemptions:
        victim = preemption.allocation
        release_placement(by_name[victim.placement.node], victim.request, victim.placement)
    started = {s.request.id for s in plan.starts}
    for start in plan.starts:
        apply_placement(by_name[start.placement.node], start.request, start.placement)
    kept = [a for a in running if a.request.id not in evicted and a.placement.node in by_name]
    new = [RunningAllocation(s.request, s.placement, now, s.borrowed) for s in plan.starts]
    waiting = [r for r in pending if r.id not in started] + [p.allocation.request for p in plan.preemptions]
    return PassState(
        now,
        policy,
        copies,
        sorted([*kept, *new], key=lambda a: _id_order(a.request.id)),
        waiting,
        frozenset(r.id for r in pending if r.id not in started),
        list(quotas),
        list(recent)[:window],
        window,
    )


def replay(
    state: PassState,
    submitted: Iterable[RequestSpec] = (),
    withdrawn: Iterable[int | str] = (),
    ended: Iterable[int | str] = (),
) -> PassState:
    """The state with changes made since the pass: new pending requests (newest last), pending ones
    withdrawn (cancelled), running ones ended (their cards free again). Changes `state` in place.

    New requests were never tried; after a withdrawal or an end, room (or a reservation) may have
    gone, so no waiting request is known to wait any more.
    """
    gone = set(withdrawn)
    submitted = list(submitted)
    state.waiting = [r for r in state.waiting if r.id not in gone] + submitted
    state.recent = [*reversed(submitted), *state.recent][: state.window]
    finished = set(ended)
    if gone or finished:
        state.tried = frozenset()
    if finished:
        by_name = {n.name: n for n in state.nodes}
        for allocation in state.running:
            if allocation.request.id in finished:
                release_placement(
                    by_name[allocation.placement.node], allocation.request, allocation.placement
                )
        state.running = [a for a in state.running if a.request.id not in finished]
    return state


@dataclass(frozen=True, slots=True)
class CandidatePlan:
    """The candidate's start, or its waiting (as the pass reports it); node: where it starts now or
    holds a reservation ('' when it has neither)."""

    start: Start | None
    waiting: Waiting | None
    node: str


def candidate_plan(plan: PassPlan, candidate_id: int | str) -> CandidatePlan:
    """Pick the candidate's part out of a whole pass's plan (the dry run's answer)."""
    for start in plan.starts:
        if start.request.id == candidate_id:
            return CandidatePlan(start, None, start.placement.node)
    waiting = next(w for w in plan.waiting if w.request_id == candidate_id)
    node = next((r.node for r in plan.reservations if r.request_id == candidate_id), "")
    return CandidatePlan(None, waiting, node)


def place_candidate(state: PassState, candidate: RequestSpec, now: float) -> CandidatePlan:
    """What the next pass would do with `candidate` (submitted at `now`), as `plan_pass` reports it."""
    mode = QueueMode()  # the database pass's rules
    recent = [candidate, *state.recent][: state.window]
    workload = WorkloadMix.from_requests(recent)
    work = _Pass(
        state.nodes,
        [*state.waiting, candidate],
        state.running,
        state.quotas,
        now,
        state.policy,
        mode,
        workload,
    )
    first_blocked: RequestSpec | None = None
    while (request := work.queue.pop()) is not None:
        if request.id in state.tried:
            _wait_again(work, request, mode)
        elif (first_blocked is None or mode.backfill) and work.try_start(request):
            work.queue.touch(request.team)
            if request.id == candidate.id:
                start = work.plan.starts[-1]
                return CandidatePlan(start, None, start.placement.node)
            continue
        else:
            work.wait(request, first_blocked)
        if request.id == candidate.id:
            break
        first_blocked = first_blocked or request
    return candidate_plan(work.finish(), candidate.id)


def _wait_again(work: _Pass, request: RequestSpec, mode: QueueMode) -> None:
    """What `_Pass.wait` does for a request ahead that waits again, less the words nobody reads."""
    reservation = None
    if len(work.book.reservations) < mode.reservation_depth and not work._never_fits(request):
        reservation = work.book.reserve(request, work.nodes)
    work._waiting.append((request, reservation))
    work.plan.waiting.append(Waiting(request.id, "", len(work.plan.waiting)))


def _id_order(request_id: int | str) -> tuple:
    return (0, request_id, "") if isinstance(request_id, int) else (1, 0, str(request_id))
