"""Reservations for blocked requests, and what they leave for backfill.

A reservation promises a blocked request cards on one node from the earliest time
they free up, judged from the max durations of what runs there. Reserved capacity
is treated as taken from now on and forever (conservative backfill): the free
capacity of a card at time t is then F(t) = free now + releases up to t - claims,
which only grows with t. So a reservation on a card holds as long as F stays
non-negative at the card's earliest reserved start, and a backfill candidate may
take a card's capacity only if it ends before that time or leaves F >= 0 there.

An allocation without a max duration is assumed to run UNKNOWN_RUNTIME_S: a
request waiting behind it still gets a (late) reservation, so it cannot starve
behind a stream of small jobs, but its start estimate is reported as unknown.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .cluster import GpuState, NodeState, Placement, RequestSpec
from .placement import candidate_gpus, choose_placement, node_admits

UNKNOWN_RUNTIME_S = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Reservation:
    """Cards promised to a blocked request from `start_at` (seconds).

    firm is False when the time rests on an allocation with no max duration.
    """

    request_id: int | str
    node: str
    gpus: tuple[int, ...]
    start_at: float
    firm: bool


@dataclass(slots=True)
class _Hold:
    """Something that occupies a node until `end` (seconds)."""

    request_id: int | str
    end: float
    known: bool
    gpus: tuple[int, ...]
    milli: int
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int


@dataclass(slots=True)
class _Claims:
    """What the reservations on one node take, and from when (earliest start)."""

    gpu: dict[int, list[float]] = field(default_factory=dict)  # index -> [milli, MiB, first start]
    host: list[float] = field(default_factory=lambda: [0, 0, float("inf")])  # [cpu, MiB, first start]


def copy_node(node: NodeState) -> NodeState:
    """A scratch copy of a node's free state."""
    gpus = [
        GpuState(g.index, g.model, g.memory_mib, g.free_milli, g.free_memory_mib, g.mig and g.mig.copy())
        for g in node.gpus
    ]
    return NodeState(
        node.name,
        node.pool,
        node.cpu_milli,
        node.memory_mib,
        gpus,
        node.capacity_type,
        node.free_cpu_milli,
        node.free_memory_mib,
    )


def fits(request: RequestSpec, node: NodeState) -> bool:
    """Cheap check that the request's gang fits on the node as it stands."""
    return node_admits(request, node) and len(candidate_gpus(request, node)) >= request.num_gpus


class ReservationBook:
    """Holds (what runs where, until when) and claims (what is reserved) per node."""

    def __init__(self, now: float, policy: str) -> None:
        self.now = now
        self.policy = policy
        self.reservations: list[Reservation] = []
        self._holds: dict[str, list[_Hold]] = defaultdict(list)
        self._timeline: list[tuple[float, int, str, _Hold]] = []  # (end, seq, node, hold), sorted
        self._seq = itertools.count()
        self._claims: dict[str, _Claims] = {}
        self._claimed: list[tuple[RequestSpec, Placement]] = []  # each reservation's request and cards

    def hold(self, request: RequestSpec, placement: Placement, started_at: float) -> None:
        """Record that `request` runs on its placement from `started_at`."""
        known = request.max_duration_s is not None
        runtime = request.max_duration_s if known else UNKNOWN_RUNTIME_S
        hold = _Hold(
            request.id,
            started_at + runtime,
            known,
            placement.gpus,
            placement.milli,
            placement.gpu_memory_mib,
            request.cpu_milli,
            request.memory_mib,
        )
        self._holds[placement.node].append(hold)
        bisect.insort(self._timeline, (hold.end, next(self._seq), placement.node, hold))

    def leaves_by(self, request_id: int | str, node: str, at: float) -> None:
        """The request's hold on the node ends by `at` at the latest (it moves then: consolidation)."""
        later = [t for t in self._timeline if t[2] == node and t[3].request_id == request_id and t[0] > at]
        for entry in later:
            self._timeline.remove(entry)
            entry[3].end = at
            bisect.insort(self._timeline, (at, *entry[1:]))

    def drop(self, request_id: int | str, node: str) -> None:
        """Forget a hold (its allocation was preempted)."""
        self._holds[node] = [h for h in self._holds[node] if h.request_id != request_id]
        self._timeline = [t for t in self._timeline if t[2] != node or t[3].request_id != request_id]

    def fork(self, now: float, reservations: int) -> ReservationBook:
        """A book at `now` with the same holds (shared: the fork may reserve, never hold or drop) and only
        the first `reservations` reservations, their starts no earlier than `now`."""
        fork = ReservationBook(now, self.policy)
        fork._holds, fork._timeline = self._holds, self._timeline
        for (request, placement), reservation in zip(
            self._claimed[:reservations], self.reservations, strict=False
        ):
            start_at = max(now, reservation.start_at)
            fork._claim(request, placement, start_at)
            fork.reservations.append(dataclasses.replace(reservation, start_at=start_at))
        return fork

    def next_release(self, after: float) -> float:
        """The first end of something running later than `after` (s; inf when none)."""
        i = bisect.bisect_right(self._timeline, (after, float("inf")))
        return self._timeline[i][0] if i < len(self._timeline) else float("inf")

    def releases(self) -> list[tuple[str, _Hold]]:
        """(node, hold) for every hold on every node, for estimates."""
        return [(node, h) for node, holds in self._holds.items() for h in holds]

    def end_of(self, request: RequestSpec) -> float:
        """When a request started now would be gone by, at the latest."""
        runtime = request.max_duration_s
        return self.now + (UNKNOWN_RUNTIME_S if runtime is None else runtime)

    def view(self, nodes: Sequence[NodeState], end: float) -> list[NodeState]:
        """The nodes as a request ending at `end` may use them without delaying any reservation."""
        if not self._claims:
            return list(nodes)
        return [self._guarded(n, end) if n.name in self._claims else n for n in nodes]

    def guarded(self, by_name: Mapping[str, NodeState], end: float) -> dict[str, NodeState]:
        """`view` for the nodes reservations claim, by name: the only ones it changes."""
        return {name: self._guarded(by_name[name], end) for name in self._claims if name in by_name}

    def _guarded(self, node: NodeState, end: float) -> NodeState:
        claims = self._claims[node.name]
        holds = self._holds[node.name]
        guarded = copy_node(node)
        for index, (milli, mib, first) in claims.gpu.items():
            if end <= first:
                continue
            gpu = guarded.gpus[index]
            freed = [h for h in holds if h.end <= first and index in h.gpus]
            gpu.free_milli = min(gpu.free_milli, gpu.free_milli + sum(h.milli for h in freed) - int(milli))
            gpu.free_memory_mib = min(
                gpu.free_memory_mib, gpu.free_memory_mib + sum(h.gpu_memory_mib for h in freed) - int(mib)
            )
        cpu, mib, first = claims.host
        if end > first:
            freed = [h for h in holds if h.end <= first]
            guarded.free_cpu_milli = min(
                guarded.free_cpu_milli, guarded.free_cpu_milli + sum(h.cpu_milli for h in freed) - int(cpu)
            )
            guarded.free_memory_mib = min(
                guarded.free_memory_mib, guarded.free_memory_mib + sum(h.memory_mib for h in freed) - int(mib)
            )
        return guarded

    def reserve(self, request: RequestSpec, nodes: Sequence[NodeState]) -> Reservation | None:
        """Reserve the earliest cards the request could get; None if it never fits anywhere."""
        found = self.earliest(request, nodes)
        if found is None:
            return None
        start_at, firm, placement = found
        self._claim(request, placement, start_at)
        self._claimed.append((request, placement))
        reservation = Reservation(request.id, placement.node, placement.gpus, start_at, firm)
        self.reservations.append(reservation)
        return reservation

    def reserve_at(self, request: RequestSpec, placement: Placement, start_at: float) -> Reservation:
        """Reserve these cards for the request from `start_at` (a room consolidation is making for it)."""
        self._claim(request, placement, start_at)
        self._claimed.append((request, placement))
        reservation = Reservation(request.id, placement.node, placement.gpus, start_at, True)
        self.reservations.append(reservation)
        return reservation

    def claims_on(self, node: str) -> bool:
        """Whether a reservation claims capacity on the node."""
        return node in self._claims

    def earliest(
        self, request: RequestSpec, nodes: Sequence[NodeState]
    ) -> tuple[float, bool, Placement] | None:
        """(start, firm, placement) of the earliest cards the request could get, reserving nothing.

        Walk all releases in time order, claims held throughout, until the request fits a node.
        Only the node that just released something can newly fit, so each step checks one node.
        """
        live = {n.name: n for n in nodes}
        futures: dict[str, NodeState] = {}
        firm: dict[str, bool] = {}
        free: dict[str, int] = {}  # milli free on the future node: a cheap bound before the card check
        need = request.total_milli()
        steps = [(self.now, None, n.name, None) for n in nodes if fits(request, n)]  # a future <= live
        for at, _, name, hold in [*steps, *self._timeline]:
            if name not in live:
                continue
            if name not in futures:
                futures[name] = self._less_claims(live[name])
                free[name] = _usable_milli(futures[name], range(len(live[name].gpus)))
            if hold is not None:
                before = _usable_milli(futures[name], hold.gpus)
                _release(futures[name], hold)
                firm[name] = firm.get(name, True) and hold.known
                free[name] += _usable_milli(futures[name], hold.gpus) - before
            if free[name] >= need and fits(request, futures[name]):
                placement = choose_placement([futures[name]], request, self.policy)
                if placement is not None:
                    return max(self.now, at), firm.get(name, True), placement
        return None

    def _less_claims(self, node: NodeState) -> NodeState:
        """A scratch copy of the node less everything the reservations on it claim."""
        future = copy_node(node)
        claims = self._claims.get(node.name)
        if claims:
            for index, (milli, mib, _) in claims.gpu.items():
                future.gpus[index].free_milli -= int(milli)
                future.gpus[index].free_memory_mib -= int(mib)
            future.free_cpu_milli -= int(claims.host[0])
            future.free_memory_mib -= int(claims.host[1])
        return future

    def _claim(self, request: RequestSpec, placement: Placement, start_at: float) -> None:
        claims = self._claims.setdefault(placement.node, _Claims())
        for index in placement.gpus:
            claim = claims.gpu.setdefault(index, [0, 0, start_at])
            claim[0] += placement.milli
            claim[1] += placement.gpu_memory_mib
            claim[2] = min(claim[2], start_at)
        claims.host[0] += request.cpu_milli
        claims.host[1] += request.memory_mib
        claims.host[2] = min(claims.host[2], start_at)


def _release(node: NodeState, hold: _Hold) -> None:
    node.free_cpu_milli += hold.cpu_milli
    node.free_memory_mib += hold.memory_mib
    for index in hold.gpus:
        node.gpus[index].free_milli += hold.milli
        node.gpus[index].free_memory_mib += hold.gpu_memory_mib


def _usable_milli(node: NodeState, indices: Iterable[int]) -> int:
    """Free milli on those cards, ignoring cards that claims pushed below zero."""
    return sum(max(0, node.gpus[i].free_milli) for i in indices)
