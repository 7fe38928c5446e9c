"""GPU fragmentation of a node, as defined by FGD (Weng et al., USENIX ATC 2023).

A node's fragmentation is the expected amount of its idle GPU (milli-GPU) that
a request drawn from the workload's typical shapes could NOT use, weighted by
how popular each shape is. For one shape:

* the shape fits (enough eligible cards with that much free share, and enough
  free CPU): the free share on the cards too small or of the wrong model is
  fragment;
* it does not fit, or it is CPU-only: all the node's idle GPU is fragment.

Placing where this number grows least keeps capacity usable for what is
likely to arrive next. The host-aware variant (``fgd-plus`` breaks FGD's ties
with it) also asks how many requests of a shape the node's free CPU and
memory can still host, and counts only that many cards as usable.
``node_fragmentation`` is the readable reference; ``FragmentationModel.batch``
computes the same number for many node states at once, compiled, which is
what the placement engine uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numba
import numpy as np

from .cluster import NodeState, RequestSpec

DEFAULT_COVERAGE = 0.95
_NO_LIMIT = 1 << 40
# Fixed-point unit of the weights. They sum to 1, so a node's weighted idle milli stays below
# 2**28 * its idle milli (2**42 for 16 cards): an exact int64, an exact float, and so is the
# difference of two.
_UNIT = 1 << 28


@dataclass(frozen=True, slots=True)
class Shape:
    """A request's resource shape: CPU milli-cores, milli-GPU per card, cards, allowed models."""

    cpu_milli: int
    gpu_milli: int
    num_gpus: int
    models: frozenset[str] = frozenset()

    @classmethod
    def of(cls, request: RequestSpec) -> Shape:
        gpu_milli = request.gpu_milli if request.num_gpus else 0
        return cls(request.cpu_milli, gpu_milli, request.num_gpus, request.models)


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """The typical request shapes and their popularity (weights sum to 1; empty = unknown).

    ``memory_mib`` is each shape's mean host memory (MiB); only host-aware
    fragmentation reads it, and empty means "none". ``gangs`` are every
    multi-card request seen, however rare, as (shape, host memory MiB): too
    rare to weigh in the fragmentation, yet each needs a whole node's worth
    of free cards, CPU and memory, which ``fgd-plus`` keeps for them.
    ``pinned`` is, per set of GPU models some requests are constrained to,
    those requests' share of all GPU asked for (every request counted):
    ``fgd-plus`` steers unconstrained requests off the models they need.
    ``cpu_per_gpu`` is the requests' CPU milli-cores per milli-GPU (all
    requests, CPU-only ones included; 0 = unknown).
    """

    shapes: tuple[Shape, ...] = ()
    weights: tuple[float, ...] = ()
    memory_mib: tuple[float, ...] = ()
    gangs: tuple[tuple[Shape, int], ...] = ()
    pinned: tuple[tuple[frozenset[str], float], ...] = ()
    cpu_per_gpu: float = 0.0

    @classmethod
    def from_requests(
        cls, requests: Iterable[RequestSpec], coverage: float = DEFAULT_COVERAGE
    ) -> WorkloadMix:
        """The most common shapes covering `coverage` of the requests, renormalised.

        Mirrors the FGD simulator's typical-pod selection (popularity
        threshold 95 %, CPU-only requests included), so rare one-off shapes do
        not steer placement.
        """
        requests = list(requests)
        counts = Counter(Shape.of(r) for r in requests)
        memory: Counter[Shape] = Counter()
        for r in requests:
            memory[Shape.of(r)] += r.memory_mib
        total = sum(counts.values())
        if not total:
            return cls()
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _shape_order(kv[0])))
        chosen: list[tuple[Shape, int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= coverage * total:
                break
            chosen.append((shape, count))
            covered += count
        gang_set = {(Shape.of(r), r.memory_mib) for r in requests if r.num_gpus > 1}
        gangs = sorted(gang_set, key=lambda g: (_shape_order(g[0]), g[1]))
        pinned: Counter[frozenset[str]] = Counter()
        for r in requests:
            if r.models and r.num_gpus:
                pinned[r.models] += r.total_milli()
        gpu_total = sum(r.total_milli() for r in requests if r.num_gpus) or 1
        return cls(
            tuple(s for s, _ in chosen),
            tuple(c / covered for _, c in chosen),
            tuple(memory[s] / c for s, c in chosen),
            tuple(gangs),
            tuple((models, milli / gpu_total) for models, milli in sorted(pinned.items(), key=_models_order)),
            sum(r.cpu_milli for r in requests) / gpu_total,
        )

    def memory_of(self, i: int) -> float:
        return self.memory_mib[i] if self.memory_mib else 0.0


def _models_order(item: tuple[frozenset[str], int]) -> list[str]:
    return sorted(item[0])


def _shape_order(shape: Shape) -> tuple:
    return (shape.cpu_milli, shape.gpu_milli, shape.num_gpus, sorted(shape.models))


def _host_room(free_cpu: int, free_memory: int, cpu: int, memory: float) -> float:
    """How many requests of a shape the node's free CPU and memory can still host."""
    room = float("inf")
    if cpu > 0:
        room = free_cpu // cpu
    if memory > 0:
        room = min(room, free_memory // memory)
    return room


def node_fragmentation(node: NodeState, mix: WorkloadMix, host_aware: bool = False) -> float:
    """Expected idle milli-GPU of this node that the mix cannot use (reference implementation).

    FGD asks only whether ONE request of a shape fits. ``host_aware`` also
    asks how many its free CPU and memory can host: with room for k requests
    of n cards, only the k * n roomiest usable cards count as usable, so a
    placement that eats the CPU or memory the node's idle cards need shows as
    fragmentation growth.
    """
    idle = sum(g.free_milli for g in node.gpus)
    frag = 0.0
    for i, (shape, weight) in enumerate(zip(mix.shapes, mix.weights, strict=True)):
        if shape.num_gpus == 0:
            frag += weight * idle
            continue
        usable = [
            g.free_milli
            for g in node.gpus
            if g.free_milli >= shape.gpu_milli and (not shape.models or g.model in shape.models)
        ]
        fits = len(usable) >= shape.num_gpus and node.free_cpu_milli >= shape.cpu_milli
        if fits and host_aware:
            room = _host_room(node.free_cpu_milli, node.free_memory_mib, shape.cpu_milli, mix.memory_of(i))
            fits = room >= 1
            usable = sorted(usable, reverse=True)[: int(min(room * shape.num_gpus, len(usable)))]
        frag += weight * (idle - sum(usable) if fits else idle)
    return frag


class FragmentationModel:
    """The mix compiled to arrays, and the fragmentation of many node states per call of a compiled
    loop (numba): a node state is a handful of small integers, which per-state numpy calls would
    spend most of their time dispatching.

    Node states are given as free CPU (K,), free milli per card (K, G; 0..1000),
    with missing cards at 0, each card's model as an index into `models` (-1 for a
    missing card) and free memory (K,), which only a host-aware model reads.
    """

    def __init__(self, mix: WorkloadMix, models: list[str], host_aware: bool = False) -> None:
        gpu = [i for i, s in enumerate(mix.shapes) if s.num_gpus]
        self.host_aware = host_aware
        cpu_only_weight = sum(w for s, w in zip(mix.shapes, mix.weights, strict=True) if not s.num_gpus)
        # Weights in fixed point: sums of integers are exact, so a node state scores the same bits in
        # any batch and equal increases are equal (a float product rounds by the batch's shape).
        units = [round(mix.weights[i] * _UNIT) for i in gpu]
        # Per GPU shape: its share per card, cards, CPU milli and weight (see _SHARE.._UNITS).
        self.shapes = np.array(
            [
                (mix.shapes[i].gpu_milli, mix.shapes[i].num_gpus, mix.shapes[i].cpu_milli, u)
                for i, u in zip(gpu, units, strict=True)
            ],
            dtype=np.int64,
        ).reshape(len(gpu), 4)
        self.memory = np.array([mix.memory_of(i) for i in gpu], dtype=np.float64)
        # The weights of all shapes: a node's idle milli counts as fragment unless a shape uses it.
        self.total_units = round(float(cpu_only_weight) * _UNIT) + sum(units)
        # eligible[s, m]: shape s may run on model m; the extra last column is "no card" (model -1).
        self.eligible = np.zeros((len(gpu), len(models) + 1), dtype=bool)
        for row, i in enumerate(gpu):
            for m, model in enumerate(models):
                self.eligible[row, m] = not mix.shapes[i].models or model in mix.shapes[i].models

    def batch(
        self,
        cpu_free: np.ndarray,
        gpu_free: np.ndarray,
        gpu_model: np.ndarray,
        mem_free: np.ndarray | None = None,
    ) -> np.ndarray:
        """Fragmentation (milli-GPU, float) of K node states; host-aware if the model is."""
        assert mem_free is not None or not self.host_aware, "a host-aware model needs free memory"
        plain, host = self.batch_pair(
            cpu_free, gpu_free, gpu_model, cpu_free if mem_free is None else mem_free
        )
        return host if self.host_aware else plain

    def batch_pair(
        self, cpu_free: np.ndarray, gpu_free: np.ndarray, gpu_model: np.ndarray, mem_free: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FGD's fragmentation, host-aware fragmentation) of K node states, sharing the work (the
        second is meaningless unless the model is host-aware)."""
        plain, host = np.empty(len(cpu_free)), np.empty(len(cpu_free))
        fragmentation_of_states(
            np.ascontiguousarray(cpu_free, dtype=np.int64),
            np.ascontiguousarray(mem_free, dtype=np.int64),
            np.ascontiguousarray(gpu_free, dtype=np.int64),
            np.ascontiguousarray(gpu_model, dtype=np.int64),
            self.kernel(),
            plain,
            host,
        )
        return plain, host

    def kernel(self) -> tuple:
        """The model as the compiled functions take it."""
        return (self.host_aware, self.shapes, self.memory, self.eligible, self.total_units)


# Columns of FragmentationModel.shapes.
_SHARE, _CARDS, _CPU, _UNITS = range(4)


@numba.njit(cache=True, nogil=True)
def _fragmentation_of_state(cpu_free, mem_free, gpu_free, gpu_model, model, usable):
    """(FGD's, host-aware) fragmentation of one node state (its cards: gpu_free, gpu_model), as
    ``node_fragmentation`` counts it. The sums are exact integers (weights in ``_UNIT``) divided once
    by a power of two, so a state scores the same bits wherever it is scored. `usable`: scratch of
    one slot per card."""
    host_aware, shapes, memory, eligible, total_units = model
    idle = 0
    for c in range(len(gpu_free)):
        idle += gpu_free[c]
    plain_sum = 0
    host_sum = 0
    for s in range(len(shapes)):
        if cpu_free < shapes[s, _CPU]:
            continue
        # The shape's usable cards' free milli, roomiest first.
        count = 0
        total = 0
        for c in range(len(gpu_free)):
            free = gpu_free[c]
            if free >= shapes[s, _SHARE] and eligible[s, gpu_model[c]]:
                i = count
                while i > 0 and usable[i - 1] < free:
                    usable[i] = usable[i - 1]
                    i -= 1
                usable[i] = free
                count += 1
                total += free
        if count < shapes[s, _CARDS]:
            continue
        plain_sum += shapes[s, _UNITS] * total
        if not host_aware:
            continue
        # How many of the shape the host could still take (a shape asking for no CPU or memory is not
        # limited by it; memory is floored as a float, as numpy and Python floor it): only that many
        # times its cards, the roomiest, count as usable.
        cpu = shapes[s, _CPU]
        by_cpu = float(cpu_free // cpu) if cpu > 0 else float(cpu_free + _NO_LIMIT)
        by_memory = float(mem_free) // memory[s] if memory[s] > 0 else float(mem_free + _NO_LIMIT)
        room = int(min(by_cpu, by_memory))
        if room < 1:
            continue
        top = 0
        for i in range(min(room * shapes[s, _CARDS], count)):
            top += usable[i]
        host_sum += shapes[s, _UNITS] * top
    return (total_units * idle - plain_sum) / _UNIT, (total_units * idle - host_sum) / _UNIT


@numba.njit(cache=True, nogil=True)
def fragmentation_of_states(cpu_free, mem_free, gpu_free, gpu_model, model, plain, host):
    """Fills plain[k], host[k] with node state k's fragmentation."""
    usable = np.empty(gpu_free.shape[1], dtype=np.int64)
    for k in range(len(cpu_free)):
        plain[k], host[k] = _fragmentation_of_state(
            cpu_free[k], mem_free[k], gpu_free[k], gpu_model[k], model, usable
        )


@numba.njit(cache=True, nogil=True)
def current_fragmentation(rows, state, cpu_free, mem_free, gpu_free, gpu_model, model, known, plain, host):
    """(FGD's, host-aware) fragmentation of nodes `rows` as they are now, from a cache by node state id
    (`known`, `plain`, `host`, indexed by ``state[row]``; the caller makes them long enough): each
    state is computed once, ever."""
    usable = np.empty(gpu_free.shape[1], dtype=np.int64)
    before_plain = np.empty(len(rows))
    before_host = np.empty(len(rows))
    for i in range(len(rows)):
        j, k = rows[i], state[rows[i]]
        if not known[k]:
            plain[k], host[k] = _fragmentation_of_state(
                cpu_free[j], mem_free[j], gpu_free[j], gpu_model[j], model, usable
            )
            known[k] = True
        before_plain[i], before_host[i] = plain[k], host[k]
    return before_plain, before_host


@numba.njit(cache=True, nogil=True)
def card_increases(rows, cards, request, cpu_free, mem_free, gpu_free, gpu_model, model, before, picked):
    """For a one-card request at `rows` (their usable cards: `cards`, one row each): per candidate
    card k, its row's position, the card and its free milli in picked[:, k] (the caller's scratch,
    as long as all the cards), and, returned as increase[:, k], the (FGD, host-aware) fragmentation
    increase of taking the request there. `request`: (CPU milli, memory MiB, milli); `before`: the
    rows' fragmentation now. Cards of a node with the same free share and model leave it in the same
    state (the fragmentation does not depend on the cards' order): each such state is a candidate
    once, as its lowest card. (One array back: numba boxes each returned array at a cost.)"""
    cpu, memory, milli = request
    before_plain, before_host = before
    most = 0
    for i in range(cards.shape[0]):
        for c in range(cards.shape[1]):
            most += cards[i, c]
    increase = np.empty((2, most))
    after = np.empty(cards.shape[1], dtype=np.int64)
    usable = np.empty(cards.shape[1], dtype=np.int64)
    n = 0
    for i in range(len(rows)):
        j = rows[i]
        for c in range(cards.shape[1]):
            if not cards[i, c]:
                continue
            alike = False
            for d in range(c):
                if cards[i, d] and gpu_free[j, d] == gpu_free[j, c] and gpu_model[j, d] == gpu_model[j, c]:
                    alike = True
                    break
            if alike:
                continue
            after[:] = gpu_free[j]
            after[c] -= milli
            p, h = _fragmentation_of_state(
                cpu_free[j] - cpu, mem_free[j] - memory, after, gpu_model[j], model, usable
            )
            picked[0, n], picked[1, n], picked[2, n] = i, c, gpu_free[j, c]
            increase[0, n], increase[1, n] = p - before_plain[i], h - before_host[i]
            n += 1
    return increase[:, :n]
