"""GPU fragmentation of a node, as defined by FGD (Weng et al., USENIX ATC 2023).

A node's fragmentation is the expected amount of its idle GPU (milli-GPU) that
a request drawn from the workload's typical shapes could NOT use, weighted by
how popular each shape is. For one shape:

* the shape fits (enough eligible cards with that much free share, and enough
  free CPU): the free share on the cards too small or of the wrong model is
  fragment;
* it does not fit, or it is CPU-only: all the node's idle GPU is fragment.

Placing where this number grows least keeps capacity usable for what is
likely to arrive next. ``node_fragmentation`` is the readable reference;
``FragmentationModel.batch`` computes the same number for many node states at
once with numpy, which is what the placement engine uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .cluster import NodeState, RequestSpec

DEFAULT_COVERAGE = 0.95


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
    """The typical request shapes and their popularity (weights sum to 1; empty = unknown)."""

    shapes: tuple[Shape, ...] = ()
    weights: tuple[float, ...] = ()

    @classmethod
    def from_requests(
        cls, requests: Iterable[RequestSpec], coverage: float = DEFAULT_COVERAGE
    ) -> WorkloadMix:
        """The most common shapes covering `coverage` of the requests, renormalised.

        Mirrors the FGD simulator's typical-pod selection (popularity
        threshold 95 %, CPU-only requests included), so rare one-off shapes do
        not steer placement.
        """
        counts = Counter(Shape.of(r) for r in requests)
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
        return cls(tuple(s for s, _ in chosen), tuple(c / covered for _, c in chosen))


def _shape_order(shape: Shape) -> tuple:
    return (shape.cpu_milli, shape.gpu_milli, shape.num_gpus, sorted(shape.models))


def node_fragmentation(node: NodeState, mix: WorkloadMix) -> float:
    """Expected idle milli-GPU of this node that the mix cannot use (reference implementation)."""
    idle = sum(g.free_milli for g in node.gpus)
    frag = 0.0
    for shape, weight in zip(mix.shapes, mix.weights, strict=True):
        if shape.num_gpus == 0:
            frag += weight * idle
            continue
        usable = [
            g
            for g in node.gpus
            if g.free_milli >= shape.gpu_milli and (not shape.models or g.model in shape.models)
        ]
        fits = len(usable) >= shape.num_gpus and node.free_cpu_milli >= shape.cpu_milli
        frag += weight * (idle - sum(g.free_milli for g in usable) if fits else idle)
    return frag


class FragmentationModel:
    """The mix compiled to arrays, scoring many node states per numpy call.

    Node states are given as free CPU (K,), free milli per card (K, G), with
    missing cards at 0, and each card's model as an index into `models`
    (-1 for a missing card).
    """

    def __init__(self, mix: WorkloadMix, models: list[str]) -> None:
        gpu = [(s, w) for s, w in zip(mix.shapes, mix.weights, strict=True) if s.num_gpus]
        self.cpu_only_weight = float(
            sum(w for s, w in zip(mix.shapes, mix.weights, strict=True) if not s.num_gpus)
        )
        self.weights = np.array([w for _, w in gpu], dtype=np.float64)
        self.cpu = np.array([s.cpu_milli for s, _ in gpu], dtype=np.int64)
        self.milli = np.array([s.gpu_milli for s, _ in gpu], dtype=np.int64)
        self.num = np.array([s.num_gpus for s, _ in gpu], dtype=np.int64)
        # eligible[s, m]: shape s may run on model m; the extra last column is "no card".
        self.eligible = np.zeros((len(gpu), len(models) + 1), dtype=bool)
        for i, (shape, _) in enumerate(gpu):
            for m, model in enumerate(models):
                self.eligible[i, m] = not shape.models or model in shape.models

    def batch(self, cpu_free: np.ndarray, gpu_free: np.ndarray, gpu_model: np.ndarray) -> np.ndarray:
        """Fragmentation (milli-GPU, float) of K node states."""
        idle = gpu_free.sum(axis=1)
        frag = self.cpu_only_weight * idle
        if not len(self.weights):
            return frag
        usable = (gpu_free[None, :, :] >= self.milli[:, None, None]) & self.eligible[:, gpu_model]
        fits = (usable.sum(axis=2) >= self.num[:, None]) & (cpu_free[None, :] >= self.cpu[:, None])
        usable_milli = np.where(usable, gpu_free[None, :, :], 0).sum(axis=2)
        per_shape = idle[None, :] - np.where(fits, usable_milli, 0)
        return frag + self.weights @ per_shape
