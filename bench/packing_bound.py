"""How much GPU an omniscient packer could place: an upper bound, solved with HiGHS (``highspy``).

``max_placed(nodes, pods)`` bounds from above the GPU milli that any packing of `pods` onto `nodes`
can place, every pod whole on one node (CPU, memory, GPU model, cards), any subset of the pods
left out. ``100 - 100 * bound / capacity`` is then a floor under the replay's "unallocated GPU %"
that no policy, online or offline, can go below with the same pods. Such a packer leaves every
CPU-only pod out; ``required=`` names pods it must place as well (the CPU-only pods a policy did
place), for a floor under the packings that do.

The model, a MILP over node *types* (identical CPU, memory, card count and model) and pod *classes*
(identical CPU, memory, cards, milli per card and allowed models):

* ``x[j, t]``: pods of class j on nodes of type t (integer; only where one such pod fits an empty
  node of the type); at most the class's count in all, at least its required count.
* per type: the pods' CPU and memory at most the type's total (count x per-node capacity);
* per type, the cards, as an arc-flow (Valerio de Carvalho): a card is a path from 0 to 1000 milli
  whose arcs are the slices it holds, in non-increasing size; the type's ``count x cards`` paths
  start at 0, less one per card taken whole; a path may end anywhere (the card's idle rest). The
  pods of each slice size on the type are at most the arcs of that size.
* per type: pods asking more than half a node's CPU (or memory) at most one per node.
* objective: the GPU milli placed.

Why it is a relaxation (so its optimum, and the solver's dual bound, is >= any real packing's): take
a real packing, count its pods per (class, type) as ``x``, and give each of its cards the path of
its slices sorted by size. The totals over a type's nodes keep every per-node limit summed, so the
CPU, memory and card rows hold; more-than-half pods cannot share a node; the card paths are valid
flow. What the model forgets is only which node of a type a card or a pod is on (a node's CPU may be
"borrowed" by another node of its type). Cards are exact: the arc-flow admits exactly the ways to
fill a card with slices summing to at most 1000 milli, so indivisible slices (two 600-milli pods
cannot share a card) count in the bound.

The solve stops at `time_limit_s`; ``PackingBound.upper`` is the MIP's dual bound (the optimum when
solved), rounded down to whole milli after 0.01 milli of slack for the solver's tolerances, so it is
valid wherever the solver stopped. ``incumbent`` is the best solution found for this model, so
``gap`` says how much a longer solve could still lower the bound; it is feasible per type, not
always per node, so it is no real packing. ``offline_packing`` is one: a policy's packing improved
by the solver a dozen nodes at a time, exactly per node and per card; the optimum lies between it
and the bound.

This is a bench tool: the portal never imports it (highspy is in requirements-dev.txt only).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

import highspy
import numpy as np

from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.placement import Placer

Card = tuple[bool, dict[int, int]]  # taken whole; else slots for slices: {milli: how many}


@dataclass(frozen=True)
class PackingBound:
    """GPU milli: `upper` bounds every packing's placed GPU from above; `incumbent` is the solver's
    best solution of the aggregated model; `gap` is (upper - incumbent) / upper."""

    upper: int
    incumbent: int
    seconds: float
    optimal: bool

    @property
    def gap(self) -> float:
        return (self.upper - self.incumbent) / self.upper if self.upper else 0.0


@dataclass(frozen=True)
class _Type:
    cpu: int
    memory: int
    cards: int
    model: str


@dataclass(frozen=True)
class _Class:
    cpu: int
    memory: int
    num_gpus: int
    milli: int
    models: frozenset[str]

    def fits(self, t: _Type) -> bool:
        if self.cpu > t.cpu or self.memory > t.memory or self.num_gpus > t.cards:
            return False
        return not self.num_gpus or not self.models or t.model in self.models

    @property
    def slice(self) -> bool:
        return self.num_gpus == 1 and self.milli < MILLI_PER_GPU


def _node_type(node: NodeState) -> _Type:
    models = {g.model for g in node.gpus}
    if len(models) > 1:
        raise ValueError(f"node {node.name} mixes GPU models {sorted(models)}: not modelled")
    return _Type(node.cpu_milli, node.memory_mib, len(node.gpus), models.pop() if models else "")


def _pod_class(pod: RequestSpec) -> _Class:
    if pod.gpu_memory_mib or pod.pools:
        raise ValueError(f"pod {pod.id}: explicit GPU memory or pools are not modelled")
    return _Class(pod.cpu_milli, pod.memory_mib, pod.num_gpus, pod.gpu_milli, pod.models)


class _Model:
    """Columns and rows of a maximisation MILP, in the shape highspy's HighsLp wants."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []

    def column(self, cost: float, upper: float = math.inf) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, coefficients: dict[int, float], lower: float = -math.inf, upper: float = math.inf) -> None:
        self.rows.append((coefficients, lower, upper))

    def solve(self, time_limit_s: float) -> tuple[float, float, highspy.HighsModelStatus, list[float]]:
        """(dual bound, incumbent objective, status, incumbent's column values); the incumbent is 0
        (values empty) if none was found, the dual bound infinite if the solver stopped before one."""
        h = self._highs(time_limit_s)
        h.run()
        info = h.getInfo()
        found = info.primal_solution_status == 2  # kSolutionStatusFeasible
        incumbent = info.objective_function_value if found else 0.0
        values = list(h.getSolution().col_value) if found else []
        dual = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else math.inf
        return dual, incumbent, h.getModelStatus(), values

    def _highs(self, time_limit_s: float) -> highspy.Highs:
        lp = highspy.HighsLp()
        n = len(self.cost)
        inf = highspy.kHighsInf
        lp.num_col_, lp.num_row_ = n, len(self.rows)
        lp.col_cost_ = np.array(self.cost)
        lp.col_lower_ = np.zeros(n)
        lp.col_upper_ = np.array([min(u, inf) for u in self.upper])
        lp.row_lower_ = np.array([max(lo, -inf) for _, lo, _ in self.rows])
        lp.row_upper_ = np.array([min(up, inf) for _, _, up in self.rows])
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n
        starts, index, value = [0], [], []
        for coefficients, _, _ in self.rows:
            index.extend(coefficients)
            value.extend(coefficients.values())
            starts.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(value, dtype=np.float64)
        h = highspy.Highs()
        h.silent()
        h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        h.passModel(lp)
        return h


def _arcs(sizes: Sequence[int], top: int) -> list[tuple[int, int]]:
    """Arc-flow arcs (start, size) in units: a slice of `size` may start at a position reached from 0
    by slices no smaller than it, and must end by `top` (every way to fill a card, sorted by size)."""
    arcs = []
    reached = {0}
    for size in sorted(set(sizes), reverse=True):
        grown = set(reached)
        for start in sorted(reached):  # reachable using this size too, any number of times
            pos = start + size
            while pos <= top and pos not in grown:
                grown.add(pos)
                pos += size
        arcs += [(start, size) for start in sorted(grown) if start + size <= top]
        reached = grown
    return arcs


def max_placed(
    nodes: Sequence[NodeState],
    pods: Sequence[RequestSpec],
    time_limit_s: float = 60.0,
    required: Sequence[RequestSpec] = (),
) -> PackingBound | None:
    """An upper bound on the GPU milli any packing of `pods` onto the empty `nodes` places (module doc),
    among the packings that also place every pod of `required` (None if the model finds none can)."""
    started = time.perf_counter()
    types = Counter(_node_type(n) for n in nodes)
    optional = Counter(_pod_class(p) for p in pods if p.num_gpus)  # an optional CPU-only pod never helps
    needed = Counter(_pod_class(p) for p in required)
    arrived = sum(p.total_milli() for p in [*pods, *required])
    m = _Model()
    x: dict[tuple[_Class, _Type], int] = {}
    for c in optional | needed:
        count = optional[c] + needed[c]
        row = {}
        for t in types:
            if c.fits(t):
                x[c, t] = col = m.column(c.milli * c.num_gpus / MILLI_PER_GPU, count)
                row[col] = 1.0
        if needed[c] and not row:
            return None
        m.row(row, lower=needed[c], upper=count)
    unit = reduce(math.gcd, [c.milli for c in optional | needed if c.slice], MILLI_PER_GPU)
    for t, count in types.items():
        on_t = {c: col for (c, tt), col in x.items() if tt == t}
        m.row({col: c.cpu for c, col in on_t.items() if c.cpu}, upper=count * t.cpu)
        m.row({col: c.memory for c, col in on_t.items() if c.memory}, upper=count * t.memory)
        m.row({col: 1.0 for c, col in on_t.items() if 2 * c.cpu > t.cpu}, upper=count)
        m.row({col: 1.0 for c, col in on_t.items() if 2 * c.memory > t.memory}, upper=count)
        whole = {col: float(c.num_gpus) for c, col in on_t.items() if c.num_gpus and not c.slice}
        sizes = sorted({c.milli // unit for c in on_t if c.slice})
        flow = {arc: m.column(0.0) for arc in _arcs(sizes, MILLI_PER_GPU // unit)}
        m.row({**whole, **{col: 1.0 for (start, _), col in flow.items() if not start}}, upper=count * t.cards)
        for pos in {start for start, _ in flow if start}:  # what arrives at pos goes on or stops there
            balance = {col: 1.0 for (start, size), col in flow.items() if start + size == pos}
            balance.update({col: -1.0 for (start, _), col in flow.items() if start == pos})
            m.row(balance, lower=0.0)
        for size in sizes:
            row = {col: 1.0 for c, col in on_t.items() if c.slice and c.milli == size * unit}
            row.update({col: -1.0 for (_, s), col in flow.items() if s == size})
            m.row(row, upper=0.0)
    if not x:
        return PackingBound(0, 0, time.perf_counter() - started, True)
    dual, incumbent, status, _ = m.solve(time_limit_s)
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    # the objective is in GPUs, its values whole milli: round the bound down, after 0.01 milli of slack
    upper = min(arrived, math.floor(dual * MILLI_PER_GPU + 0.01)) if math.isfinite(dual) else arrived
    optimal = status == highspy.HighsModelStatus.kOptimal
    return PackingBound(upper, round(incumbent * MILLI_PER_GPU), time.perf_counter() - started, optimal)


def offline_packing(
    nodes: Sequence[NodeState],
    pods: Sequence[RequestSpec],
    time_limit_s: float = 60.0,
    required: Sequence[RequestSpec] = (),
    policy: str = "fgd-plus",
    neighbourhood: int = 12,
    seed: int = 0,
) -> int:
    """GPU milli placed by a real packing of `pods` (and every pod of `required`, if `policy` places
    them all; else 0): `policy` places them in the given order, then the solver repacks a few nodes
    at a time (a large-neighbourhood search) until `time_limit_s`. Each step frees `neighbourhood`
    nodes, half of them among those with idle GPU, and solves exactly, per node and per card, which
    of their pods and the pods not placed yet they hold; it keeps the answer only if more GPU is
    placed and every required pod still is. The result is checked card by card (``_check``)."""
    deadline = time.perf_counter() + time_limit_s
    rng = np.random.default_rng(seed)
    placer = Placer([_empty(n) for n in nodes], policy, WorkloadMix.from_requests([*pods, *required]))
    on: list[list[RequestSpec]] = [[] for _ in nodes]
    row = {n.name: i for i, n in enumerate(nodes)}
    waiting = []
    needed = {id(p) for p in required}
    for p in [*required, *pods]:
        placement = placer.place(p)
        if placement is not None:
            on[row[placement.node]].append(p)
        elif id(p) in needed:
            return 0
        elif p.num_gpus:
            waiting.append(p)
    cards: list[list[Card] | None] = [None] * len(nodes)  # where the solver set them
    while time.perf_counter() < deadline - 0.5 and waiting:
        idle = np.array(
            [len(n.gpus) * MILLI_PER_GPU - sum(p.total_milli() for p in on[i]) for i, n in enumerate(nodes)]
        )
        half = neighbourhood // 2
        with_idle = np.flatnonzero(idle > 0)
        chosen = set(rng.choice(with_idle, size=min(half, len(with_idle)), replace=False).tolist())
        others = np.array([i for i in range(len(nodes)) if i not in chosen])
        chosen |= set(
            rng.choice(others, size=min(neighbourhood - len(chosen), len(others)), replace=False).tolist()
        )
        chosen_nodes = sorted(chosen)
        pool = [p for i in chosen_nodes for p in on[i]] + waiting
        before = sum(p.total_milli() for i in chosen_nodes for p in on[i])
        left = deadline - time.perf_counter()
        repacked = _repack([nodes[i] for i in chosen_nodes], pool, needed, min(left, 10.0))
        if repacked is None or sum(p.total_milli() for ps, _ in repacked for p in ps) <= before:
            continue
        for i, (ps, its_cards) in zip(chosen_nodes, repacked, strict=True):
            on[i], cards[i] = ps, its_cards
        taken = {id(p) for ps, _ in repacked for p in ps}
        waiting = [p for p in pool if p.num_gpus and id(p) not in taken]
    for n, ps, its_cards in zip(nodes, on, cards, strict=True):
        _check(n, ps, its_cards)
    return sum(p.total_milli() for ps in on for p in ps)


def _repack(
    nodes: Sequence[NodeState], pool: Sequence[RequestSpec], needed: set[int], time_limit_s: float
) -> list[tuple[list[RequestSpec], list[Card]]] | None:
    """The most GPU the empty `nodes` hold from `pool`, keeping every pod whose id() is in `needed`:
    per node its pods and its cards; None if the solver found no solution in time."""
    by_class: dict[_Class, list[RequestSpec]] = {}
    for p in pool:
        by_class.setdefault(_pod_class(p), []).append(p)
    m = _Model()
    y: dict[tuple[_Class, int], int] = {}
    for c, ps in by_class.items():
        row = {}
        for j, n in enumerate(nodes):
            t = _node_type(n)
            if c.fits(t):
                y[c, j] = col = m.column(c.milli * c.num_gpus / MILLI_PER_GPU, min(len(ps), _per_node(c, t)))
                row[col] = 1.0
        m.row(row, lower=sum(1 for p in ps if id(p) in needed), upper=len(ps))
    sizes = sorted({c.milli for c in by_class if c.slice})
    slots = []
    for j, n in enumerate(nodes):
        mine = {c: col for (c, jj), col in y.items() if jj == j}
        m.row({col: c.cpu for c, col in mine.items() if c.cpu}, upper=n.cpu_milli)
        m.row({col: c.memory for c, col in mine.items() if c.memory}, upper=n.memory_mib)
        b = [m.column(0.0, 1) for _ in n.gpus]
        m.row(
            {
                **{col: float(c.num_gpus) for c, col in mine.items() if c.num_gpus and not c.slice},
                **{x: -1.0 for x in b},
            },
            upper=0.0,
        )
        s = {(k, size): m.column(0.0, MILLI_PER_GPU // size) for k in range(len(n.gpus)) for size in sizes}
        for k in range(len(n.gpus)):
            m.row(
                {**{s[k, size]: float(size) for size in sizes}, b[k]: float(MILLI_PER_GPU)},
                upper=MILLI_PER_GPU,
            )
            if k:
                m.row({b[k - 1]: -1.0, b[k]: 1.0}, upper=0.0)
        for size in sizes:
            on_size = {col: 1.0 for c, col in mine.items() if c.slice and c.milli == size}
            m.row({**on_size, **{s[k, size]: -1.0 for k in range(len(n.gpus))}}, upper=0.0)
        slots.append((b, s))
    _, _, _, values = m.solve(max(time_limit_s, 0.1))
    if not values:
        return None
    taken = {c: sorted(ps, key=lambda p: id(p) not in needed) for c, ps in by_class.items()}
    out = []
    for j, n in enumerate(nodes):
        ps = []
        for c in by_class:
            if (c, j) in y:
                k = round(values[y[c, j]])
                ps += taken[c][:k]
                taken[c] = taken[c][k:]
        b, s = slots[j]
        cards = [
            (bool(round(values[b[k]])), {size: round(values[s[k, size]]) for size in sizes})
            for k in range(len(n.gpus))
        ]
        out.append((ps, cards))
    return out


def _check(node: NodeState, pods: Sequence[RequestSpec], cards: list[Card] | None) -> None:
    """Fail loudly unless the pods fit the empty node together: host resources, models, and, where the
    solver set the node's cards (else a policy placed its pods), each card whole or holding slices of
    at most 1,000 milli, and slots for every pod."""
    assert sum(p.cpu_milli for p in pods) <= node.cpu_milli, node.name
    assert sum(p.memory_mib for p in pods) <= node.memory_mib, node.name
    assert all(_pod_class(p).fits(_node_type(node)) for p in pods), node.name
    if cards is None:
        return
    whole = sum(p.num_gpus for p in pods if p.num_gpus and p.gpu_milli == MILLI_PER_GPU)
    assert whole <= sum(1 for taken, _ in cards if taken), node.name
    slots: Counter = Counter()
    for taken, slices in cards:
        assert not (taken and any(slices.values())), node.name
        assert sum(size * count for size, count in slices.items()) <= MILLI_PER_GPU, node.name
        slots.update(slices)
    sizes = Counter(p.gpu_milli for p in pods if p.num_gpus == 1 and p.gpu_milli < MILLI_PER_GPU)
    assert all(count <= slots[size] for size, count in sizes.items()), node.name


def _per_node(c: _Class, t: _Type) -> int:
    """At most this many pods of class c fit one empty node of type t."""
    most = (
        t.cards * (MILLI_PER_GPU // c.milli) if c.slice else (t.cards // c.num_gpus if c.num_gpus else 10**6)
    )
    if c.cpu:
        most = min(most, t.cpu // c.cpu)
    if c.memory:
        most = min(most, t.memory // c.memory)
    return most


def _empty(node: NodeState) -> NodeState:
    """An empty copy of the node (Placer changes the states it is given)."""
    gpus = [GpuState(g.index, g.model, g.memory_mib) for g in node.gpus]
    return NodeState(node.name, node.pool, node.cpu_milli, node.memory_mib, gpus)
