"""Where the next scheduling pass would put one more request: the pass's own rules on the state it left.

`after_pass` turns a pass's inputs and plan into the state the next pass will load
(absent changes in between); `replay` applies the few changes made since;
`NextPass` runs the pass's queue, placement, backfill and reservation code on
that state once, without a candidate, and keeps every request's turn, the
reservations and the fluid estimator's state along the queue. A candidate then
costs its place in the fair-share order (it only delays the turns of its own
team behind it), its placement try on the cards as they stand at its turn (the
same policy and backfill rule, with only the reservations ahead of it), and, if
it waits, its reservation or one fluid estimate from the state saved nearest its
turn.

Requests ahead of the candidate in queue order (fair share across teams, then
priority and age, exactly as `FairQueue` ranks them) are planned by the pass's
own code, with one shortcut that is the only approximation: a request the stored
pass found no room for, with nothing freed or withdrawn since, is taken to wait
again without being tried (it only places its reservation, if it is among the
first); so is one submitted since, once the planned turns found no room for it.
That can differ from the pass only where re-ranking lets such a request reach a
card that another team's reservation kept from it when it was tried. Everything
else that depends on the time is judged at each estimate's own `now`.
Units: milli-GPU, MiB, seconds on the caller's epoch; pure (no ORM, no clock).
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .actions import backfill, estimate, reserve, start
from .actions.work import PassWork
from .cluster import GpuState, NodeState, OfflineNode, Placement, RequestSpec
from .fragmentation import Shape, WorkloadMix
from .placement import apply_placement, release_placement
from .queue_estimates import FluidEstimator
from .queue_ledger import TeamQuota
from .queue_order import queue_key, reorder_at
from .queue_reservations import Reservation, copy_node
from .queueing import PassPlan, QueueMode, RunningAllocation, Start, Waiting

MODE = QueueMode()  # the database pass's rules


@dataclass(slots=True)
class PassState:
    """The cluster as a pass left it: what the next pass loads if nothing changes in between.

    at: when the pass ran (s). waiting: requests still pending that some pool may
    take. tried: the ids of those the pass found no room for, with nothing freed
    since. recent: the newest requests first, whose shapes make the workload mix.
    offline: the nodes that took no new work (their reasons name them).
    Pickled as plain rows of fields rather than tens of thousands of dataclasses: about
    six times faster to store in the pass, a third faster to load in each process that
    serves estimates (once per pass).
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
    unplaceable: dict[int | str, str] | None = None
    pools: tuple = ()  # the caller's description of the pools the state was loaded with
    offline: tuple[OfflineNode, ...] = ()

    def __getstate__(self) -> tuple:
        nodes = [_node_row(n) for n in self.nodes]
        running = [
            (_REQUEST_ROW(a.request), _PLACEMENT_ROW(a.placement), a.started_at, a.borrowed)
            for a in self.running
        ]
        waiting = [_REQUEST_ROW(r) for r in self.waiting]
        recent = [_REQUEST_ROW(r) for r in self.recent]
        return (
            self.at,
            self.policy,
            nodes,
            running,
            waiting,
            self.tried,
            self.quotas,
            recent,
            self.window,
            self.unplaceable,
            self.pools,
            [(_node_row(o.node), o.status, o.since) for o in self.offline],
        )

    def __setstate__(self, state: tuple) -> None:
        at, policy, nodes, running, waiting, tried, quotas, recent, window, unplaceable, pools, offline = (
            state
        )
        self.at, self.policy, self.tried, self.quotas, self.window = at, policy, tried, quotas, window
        self.unplaceable, self.pools = unplaceable, pools
        self.nodes = [_node(row) for row in nodes]
        self.running = [
            RunningAllocation(RequestSpec(*r), Placement(*p), started_at, borrowed)
            for r, p, started_at, borrowed in running
        ]
        self.waiting = [RequestSpec(*r) for r in waiting]
        self.recent = [RequestSpec(*r) for r in recent]
        self.offline = tuple(OfflineNode(_node(row), status, since) for row, status, since in offline)


def _row(cls: type) -> Callable[[object], tuple]:
    """The object's fields, in order, as one tuple: what `cls(*row)` takes back."""
    return operator.attrgetter(*(f.name for f in dataclasses.fields(cls)))


_REQUEST_ROW = _row(RequestSpec)
_PLACEMENT_ROW = _row(Placement)
_GPU_ROW = _row(GpuState)
_NODE_ROW = _row(NodeState)
_CARDS = [f.name for f in dataclasses.fields(NodeState)].index("gpus")


def _node_row(node: NodeState) -> list:
    row = list(_NODE_ROW(node))
    row[_CARDS] = [_GPU_ROW(g) for g in node.gpus]
    return row


def _node(row: list) -> NodeState:
    row = list(row)
    row[_CARDS] = [GpuState(*g) for g in row[_CARDS]]
    return NodeState(*row)


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
    unplaceable: dict[int | str, str] | None = None,
    offline: Sequence[OfflineNode] = (),
) -> PassState:
    """Apply a plan to its inputs: starts run from `now`, preempted work is pending again;
    `unplaceable`: the pending requests the pass could not consider; `offline`: the nodes that took no
    new work (see PassState)."""
    copies = [copy_node(n) for n in nodes]
    by_name = {n.name: n for n in copies}
    evicted = {p.allocation.request.id for p in plan.preemptions}
    for preemption in plan.preemptions:
        victim = preemption.allocation
        release_placement(by_name[victim.placement.node], victim.request, victim.placement)
    started = {s.request.id for s in plan.starts}
    for s in plan.starts:
        apply_placement(by_name[s.placement.node], s.request, s.placement)
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
        unplaceable,
        offline=tuple(offline),
    )


def replay(
    state: PassState,
    submitted: Iterable[RequestSpec] = (),
    withdrawn: Iterable[int | str] = (),
    ended: Iterable[int | str] = (),
) -> PassState:
    """The state with changes made since the pass: new pending requests (newest last), pending ones
    withdrawn (cancelled), running ones ended (their cards free again). `state` is left as it was:
    only the nodes that ended work ran on are copied.

    New requests were never tried; after a withdrawal or an end, room (or a reservation) may have
    gone, so no waiting request is known to wait any more.
    """
    gone, finished, submitted = set(withdrawn), set(ended), list(submitted)
    nodes, running = state.nodes, state.running
    if finished:
        by_name = {n.name: n for n in nodes}
        copied: set[str] = set()
        for allocation in running:
            if allocation.request.id in finished:
                name = allocation.placement.node
                if name not in copied:
                    by_name[name] = copy_node(by_name[name])
                    copied.add(name)
                release_placement(by_name[name], allocation.request, allocation.placement)
        nodes = [by_name[n.name] for n in nodes]
        running = [a for a in running if a.request.id not in finished]
    return dataclasses.replace(
        state,
        nodes=nodes,
        running=running,
        waiting=[r for r in state.waiting if r.id not in gone] + submitted,
        tried=frozenset() if gone or finished else state.tried,
        recent=[*reversed(submitted), *state.recent][: state.window],
    )


@dataclass(frozen=True, slots=True)
class CandidatePlan:
    """The candidate's start, or its waiting (as the pass reports it); node: where it starts now or
    holds a reservation ('' when it has neither)."""

    start: Start | None
    waiting: Waiting | None
    node: str


def candidate_plan(plan: PassPlan, candidate_id: int | str) -> CandidatePlan:
    """Pick the candidate's part out of a whole pass's plan (the dry run's answer)."""
    for s in plan.starts:
        if s.request.id == candidate_id:
            return CandidatePlan(s, None, s.placement.node)
    waiting = next(w for w in plan.waiting if w.request_id == candidate_id)
    node = next((r.node for r in plan.reservations if r.request_id == candidate_id), "")
    return CandidatePlan(None, waiting, node)


CHECKPOINT_EVERY = 256  # requests between the fluid estimator's saved states


@dataclass(frozen=True, slots=True)
class _Turn:
    """A request the next pass considers, in order: its team's rank when it heads the team's line, and
    the reservation it gets."""

    request: RequestSpec
    rank: tuple
    reservation: Reservation | None


class NextPass:
    """The next pass on a PassState, planned once up to any candidate's turn; `place` adds one candidate.

    The turns are planned at the first `now` asked and serve later ones until aging reorders a team's
    line; the fluid estimator's states along them until the first running allocation ends (at once when
    they counted a start "now"), when they are counted again. A request submitted since the pass is
    tried when the turns are planned and then waits again like those the stored pass tried. When the
    next pass would start or preempt anything before any candidate, each candidate gets the whole pass
    run up to its turn instead (correct, as slow as before).
    """

    def __init__(self, state: PassState) -> None:
        self.state = state
        self._ahead: _Ahead | None = None

    def place(self, candidate: RequestSpec, now: float) -> CandidatePlan:
        """What the next pass would do with `candidate` (submitted at `now`), as `plan_pass` reports it."""
        ahead = self._ahead
        if ahead is None or not ahead.serves(now):
            ahead = self._ahead = _Ahead(self.state, now)
        decision = ahead.place(candidate, now) if ahead.settled else None
        return decision or _run_to_turn(self.state, candidate, now)


class _Ahead:
    """The candidate-free next pass planned at `at`: every request's turn, in order."""

    def __init__(self, state: PassState, at: float) -> None:
        self.state, self.at = state, at
        self.work = PassWork(
            state.nodes,
            state.waiting,
            state.running,
            state.quotas,
            at,
            state.policy,
            MODE,
            None,  # no workload: it only steers where work starts; a start before a candidate ends the plan
            state.offline,
        )
        self.turns: list[_Turn] = []
        self.settled = self._plan_turns()
        self.order: dict[str, list[int]] = {}  # team -> its turns, in its line's order
        for i, turn in enumerate(self.turns):
            self.order.setdefault(turn.request.team, []).append(i)
        self.reserved = [i for i, turn in enumerate(self.turns) if turn.reservation is not None]
        lines = ([self.turns[i].request for i in turns] for turns in self.order.values())
        self.until = min((reorder_at(line, at, MODE.aging_s) for line in lines), default=float("inf"))
        self.mixes: dict[tuple, WorkloadMix] = {}
        self.fold: _Fold | None = None

    def serves(self, now: float) -> bool:
        """Whether planning at `now` would give the same turns."""
        return self.at <= now < self.until

    def _plan_turns(self) -> bool:
        """Run the candidate-free pass; False as soon as it would start or preempt anything."""
        first_blocked: RequestSpec | None = None
        while (request := self.work.queue.pop()) is not None:
            may_start = request.id not in self.state.tried and backfill.may_start(self.work, first_blocked)
            if may_start and start.try_start(self.work, request):
                return False
            reservation = reserve.wait(self.work, request, first_blocked, explain=False)
            self.turns.append(_Turn(request, self.work.queue.rank(request), reservation))
            first_blocked = first_blocked or request
        return True

    def place(self, candidate: RequestSpec, now: float) -> CandidatePlan | None:
        """The candidate's decision at its turn; None when a request of its team behind it holds a
        reservation ahead of its turn (then the pass itself must be run)."""
        turns, team = self.turns, candidate.team
        line = self.order.get(team, [])
        key = queue_key(candidate, now, MODE.aging_s)
        behind = bisect.bisect_left(line, key, key=lambda i: queue_key(turns[i].request, now, MODE.aging_s))
        first = line[behind - 1] + 1 if behind else 0  # other teams only from here until its turn
        rank = self.work.queue.rank(candidate)
        turn, skipped = len(turns), 0
        for i in range(first, len(turns)):
            if turns[i].request.team == team:
                if turns[i].reservation is not None:
                    return None
                skipped += 1
            elif rank < turns[i].rank:
                turn = i
                break
        fork = self.work.fork(now, self._workload(candidate), bisect.bisect_left(self.reserved, turn))
        choice = start.choose_start(fork, candidate)
        if choice is not None:
            placement = choice[0]
            started = Start(candidate, placement, fork.ledger.is_borrowed(candidate, placement.node))
            return CandidatePlan(started, None, placement.node)
        reservation = reserve.reserve_for(fork, candidate)
        first_ahead = 0 if first else next((i for i in range(turn) if turns[i].request.team != team), turn)
        cause = reserve.cause(fork, candidate, turns[first_ahead].request if first_ahead < turn else None)
        fold = self.fold
        if fold is None or not fold.serves(now):
            fold = self.fold = _Fold(self, now)
        estimated = estimate.estimate_start(fork, fold.before(first, turn, team, now), candidate, reservation)
        start_at = estimated[0] if estimated is not None and estimated[1] else None
        waiting = Waiting(candidate.id, cause, turn - skipped, start_at)
        return CandidatePlan(None, waiting, reservation.node if reservation else "")

    def _workload(self, candidate: RequestSpec) -> WorkloadMix:
        """The workload mix with the candidate counted, as the pass will see it once it is submitted;
        it depends only on the candidate's shape and host memory, so each is computed once."""
        key = (Shape.of(candidate), candidate.memory_mib)
        if key not in self.mixes:
            self.mixes[key] = WorkloadMix.from_requests([candidate, *self.state.recent][: self.state.window])
        return self.mixes[key]


class _Fold:
    """The fluid estimator counted along the turns at `at`, its state kept every CHECKPOINT_EVERY turns.

    It serves a later `now` as long as no running allocation ends in between and no estimate it counted
    was "now" (those would then count from `now`): see `serves`.
    """

    def __init__(self, ahead: _Ahead, at: float) -> None:
        self.ahead, self.at, self.until = ahead, at, at
        self.reservations = {  # the reservations ahead as the pass would make them at `at`
            i: dataclasses.replace(r, start_at=max(at, r.start_at))
            for i in ahead.reserved
            if (r := ahead.turns[i].reservation) is not None
        }
        self.checkpoints: list[FluidEstimator] = []
        fluid, now_counted = estimate.estimator(ahead.work).at(at), False
        for i, turn in enumerate(ahead.turns):
            if i % CHECKPOINT_EVERY == 0:
                self.checkpoints.append(fluid.at(at))
            estimated = estimate.estimate_start(ahead.work, fluid, turn.request, self.reservations.get(i))
            now_counted = now_counted or (estimated is not None and estimated[0] <= at)
        if len(ahead.turns) % CHECKPOINT_EVERY == 0:
            self.checkpoints.append(fluid)
        if not now_counted:
            self.until = ahead.work.book.next_release(at)

    def serves(self, now: float) -> bool:
        """Whether counting again at `now` would give the same states."""
        return now == self.at or self.at <= now < self.until

    def before(self, first: int, turn: int, team: str, now: float) -> FluidEstimator:
        """The estimator at `now` with everything ahead of a candidate of `team` counted: every turn
        before `first`, then other teams' turns until the candidate's `turn`."""
        begin = first // CHECKPOINT_EVERY * CHECKPOINT_EVERY
        fluid = self.checkpoints[begin // CHECKPOINT_EVERY].at(self.at)
        for i in range(begin, turn):
            ahead = self.ahead.turns[i]
            if i < first or ahead.request.team != team:
                estimate.estimate_start(self.ahead.work, fluid, ahead.request, self.reservations.get(i))
        return fluid.at(now)


def _run_to_turn(state: PassState, candidate: RequestSpec, now: float) -> CandidatePlan:
    """The pass's own loop with the candidate added, on fresh copies, stopped at the candidate's turn."""
    recent = [candidate, *state.recent][: state.window]
    work = PassWork(
        state.nodes,
        [*state.waiting, candidate],
        state.running,
        state.quotas,
        now,
        state.policy,
        MODE,
        WorkloadMix.from_requests(recent),
        state.offline,
    )
    first_blocked: RequestSpec | None = None
    while (request := work.queue.pop()) is not None:
        if request.id in state.tried:
            reserve.wait(work, request, first_blocked, explain=False)
        elif backfill.may_start(work, first_blocked) and start.try_start(work, request):
            work.queue.touch(request.team)
            if request.id == candidate.id:
                started = work.plan.starts[-1]
                return CandidatePlan(started, None, started.placement.node)
            continue
        else:
            reserve.wait(work, request, first_blocked)
        if request.id == candidate.id:
            break
        first_blocked = first_blocked or request
    return candidate_plan(estimate.finish(work), candidate.id)


def _id_order(request_id: int | str) -> tuple:
    return (0, request_id, "") if isinstance(request_id, int) else (1, 0, str(request_id))
