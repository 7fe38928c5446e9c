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
computes the same number for many node states at once with numpy, which is
what the placement engine uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .cluster import MILLI_PER_GPU, NodeState, RequestSpec

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
    """The mix compiled to arrays, scoring many node states per numpy call.

    Node states are given as free CPU (K,), free milli per card (K, G; 0..1000),
    with missing cards at 0, each card's model as an index into `models` (-1 for a
    missing card) and, for a host-aware model, free memory (K,).
    """

    def __init__(
        self, mix: WorkloadMix, models: list[str], host_aware: bool = False, mixed_nodes: bool = True
    ) -> None:
        gpu = [i for i, s in enumerate(mix.shapes) if s.num_gpus]
        self.host_aware = host_aware
        # False: the caller's node states never mix models, so none needs the card-by-card count.
        self.mixed_nodes = mixed_nodes
        self.cpu_only_weight = float(
            sum(w for s, w in zip(mix.shapes, mix.weights, strict=True) if not s.num_gpus)
        )
        self.weights = np.array([mix.weights[i] for i in gpu], dtype=np.float64)
        # Weights in fixed point: sums of integers are exact, so a node state scores the same bits in
        # any batch and equal increases are equal (a float product rounds by the batch's shape).
        self.units = np.round(self.weights * _UNIT).astype(np.int64)
        self.cpu_only_units = round(self.cpu_only_weight * _UNIT)
        # The weights of all shapes (a node's idle milli counts as fragment unless a shape uses it), and
        # [[units, 0], [0, units]] for FGD's and the host-aware sums in one product.
        self.total_units = self.cpu_only_units + int(self.units.sum())
        self.units_pair = np.kron(np.eye(2, dtype=np.int64), self.units)
        self.cpu = np.array([mix.shapes[i].cpu_milli for i in gpu], dtype=np.int64)
        self.memory = np.array([mix.memory_of(i) for i in gpu], dtype=np.float64)
        self.cpu_div = np.maximum(self.cpu, 1)[:, None]
        self.memory_div = np.where(self.memory > 0, self.memory, 1.0)[:, None]
        # Shapes asking for no CPU (memory) are never limited by it; None when every shape asks for some.
        self.cpu_pad = np.where(self.cpu > 0, 0, _NO_LIMIT)[:, None] if (self.cpu <= 0).any() else None
        self.memory_pad = (
            np.where(self.memory > 0, 0.0, float(_NO_LIMIT))[:, None] if (self.memory <= 0).any() else None
        )
        self.milli = np.array([mix.shapes[i].gpu_milli for i in gpu], dtype=np.int64)
        # at_least[v, i]: a card with v free milli holds the i-th distinct share (cards usable by a
        # shape are counted per distinct share, by lookup: cheaper than comparing every card).
        shares, self.share_of = np.unique(self.milli, return_inverse=True)
        self.at_least = (np.arange(MILLI_PER_GPU + 1)[:, None] >= shares[None, :]).astype(np.int64)
        self.num = np.array([mix.shapes[i].num_gpus for i in gpu], dtype=np.int64)
        self.num_col, self.cpu_col = self.num[:, None], self.cpu[:, None]
        self.shares_positive = bool((self.milli > 0).all())
        # eligible[s, m]: shape s may run on model m; the extra last column is "no card".
        self.eligible = np.zeros((len(gpu), len(models) + 1), dtype=bool)
        for row, i in enumerate(gpu):
            for m, model in enumerate(models):
                self.eligible[row, m] = not mix.shapes[i].models or model in mix.shapes[i].models
        # Every shape may use any model: only a node without cards would be ineligible, and it counts
        # no usable card anyway when every share is positive.
        self.any_model = bool(self.eligible[:, :-1].all()) and self.shares_positive

    def batch(
        self,
        cpu_free: np.ndarray,
        gpu_free: np.ndarray,
        gpu_model: np.ndarray,
        mem_free: np.ndarray | None = None,
    ) -> np.ndarray:
        """Fragmentation (milli-GPU, float) of K node states; host-aware if the model is."""
        if self.host_aware:
            assert mem_free is not None, "a host-aware model needs free memory"
            return self.batch_pair(cpu_free, gpu_free, gpu_model, mem_free)[1]
        return self._batch(cpu_free, gpu_free, gpu_model, None)[0]

    def batch_pair(
        self, cpu_free: np.ndarray, gpu_free: np.ndarray, gpu_model: np.ndarray, mem_free: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FGD's fragmentation, host-aware fragmentation) of K node states, sharing the work."""
        return self._batch(cpu_free, gpu_free, gpu_model, mem_free)

    def _batch(
        self,
        cpu_free: np.ndarray,
        gpu_free: np.ndarray,
        gpu_model: np.ndarray,
        mem_free: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if not len(self.weights):
            frag = self.cpu_only_units * gpu_free.sum(axis=1) / _UNIT
            return frag, frag
        # Cards roomiest first: on a node of one model a shape's usable cards are the first `count`
        # (those with at least its share, if the model is eligible), and the free milli of any first
        # few is one lookup in the running sums. Nodes mixing models are counted card by card.
        free = np.sort(gpu_free, axis=1)[:, ::-1]
        prefix = np.zeros((len(free), free.shape[1] + 1), dtype=np.int64)
        np.cumsum(free, axis=1, out=prefix[:, 1:])
        idle = prefix[:, -1]
        rows = np.arange(len(free))[None, :]
        count = self.at_least[free].sum(axis=1).T[self.share_of]
        if not self.any_model:
            count *= self.eligible[:, gpu_model[:, 0]]
        usable_milli = prefix[rows, count]
        if not self.shares_positive:  # a missing card (free 0) would pass a share of 0
            mixed = np.arange(len(free))
        elif self.mixed_nodes:
            mixed = np.flatnonzero(((gpu_model != gpu_model[:, :1]) & (gpu_model >= 0)).any(axis=1))
        else:
            mixed = ()
        if len(mixed):
            usable = (gpu_free[mixed][None, :, :] >= self.milli[:, None, None]) & self.eligible[
                :, gpu_model[mixed]
            ]
            count[:, mixed] = usable.sum(axis=2)
            usable_milli[:, mixed] = np.where(usable, gpu_free[mixed][None, :, :], 0).sum(axis=2)
        fits = (count >= self.num_col) & (cpu_free[None, :] >= self.cpu_col)
        plain_usable = np.where(fits, usable_milli, 0)
        if mem_free is None:
            plain = (self.total_units * idle - self.units @ plain_usable) / _UNIT
            return plain, plain
        # How many of each shape the host could still take (a shape asking for none: no limit).
        cpu, mem = cpu_free[None, :], mem_free[None, :]
        if self.cpu_pad is not None:
            cpu = cpu + self.cpu_pad
        if self.memory_pad is not None:
            mem = mem + self.memory_pad
        room = np.minimum(cpu // self.cpu_div, mem // self.memory_div).astype(np.int64)
        fits &= room >= 1
        take = np.minimum(room * self.num_col, count)
        usable_milli = prefix[rows, take]
        if len(mixed):
            usable_milli[:, mixed] = self._top_usable(gpu_free[mixed], gpu_model[mixed], take[:, mixed])
        # Both measures' weighted usable milli in one product (exact integers, like the sums).
        usable = self.units_pair @ np.concatenate([plain_usable, np.where(fits, usable_milli, 0)])
        both = (self.total_units * idle - usable) / _UNIT
        return both[0], both[1]

    def _top_usable(self, gpu_free: np.ndarray, gpu_model: np.ndarray, take: np.ndarray) -> np.ndarray:
        """Per shape and node (nodes mixing models): free milli of its `take` roomiest usable cards."""
        order = np.argsort(-gpu_free, axis=1, kind="stable")
        free = np.take_along_axis(gpu_free, order, axis=1)
        model = np.take_along_axis(gpu_model, order, axis=1)
        usable = (free[None, :, :] >= self.milli[:, None, None]) & self.eligible[:, model]
        usable &= np.cumsum(usable, axis=2) <= take[:, :, None]
        return np.where(usable, free[None, :, :], 0).sum(axis=2)
