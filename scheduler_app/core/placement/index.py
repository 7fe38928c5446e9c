"""The free-capacity index: the nodes as numpy arrays, and which nodes and cards a request shape fits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cluster import MILLI_PER_GPU, NodeState, RequestSpec

_FEASIBLE_SHAPES_KEPT = 512


def set_per_row(mask: np.ndarray) -> np.ndarray:
    """Per row of a 2-D boolean mask, how many are set (uint8: rows of at most 255). One small integer
    product: numpy's sum or any along a short last axis (a node's cards) costs about four times more."""
    return mask.view(np.uint8) @ np.ones(mask.shape[1], dtype=np.uint8)


class ClusterIndex:
    """The nodes as numpy arrays (one row per node, one column per card slot).

    Missing card slots have 0 free milli and model -1. ``version[j]`` grows
    whenever node j changes, which is how cached scores know they are stale.
    """

    def __init__(self, nodes: Sequence[NodeState]) -> None:
        self.nodes = list(nodes)
        self.row = {node.name: j for j, node in enumerate(self.nodes)}
        self.models = sorted({g.model for node in self.nodes for g in node.gpus})
        self.model_id = {m: i for i, m in enumerate(self.models)}
        self.pool_id = {p: i for i, p in enumerate(sorted({node.pool for node in self.nodes}))}
        n, slots = len(self.nodes), max((len(node.gpus) for node in self.nodes), default=0)
        self._state_ids: dict[tuple, int] = {}
        self._fixed: dict[tuple, np.ndarray] = {}  # masks of what never changes: pools, models, card memory
        # Per request shape: (the node versions it was computed at, feasible nodes, usable cards).
        self._feasible_by_shape: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # kind[j]: the same number for nodes whose cards are alike (models and memory; they never change).
        kinds: dict[tuple, int] = {}
        self.kind: list[int] = []
        # The rows are built as lists and made arrays once (what sync(j) would write, node by node).
        free_rows, free_memory_rows, memory_rows, model_rows, states = [], [], [], [], []
        mixed = False
        for node in self.nodes:
            free, free_memory, memory, model = [0] * slots, [0] * slots, [0] * slots, [-1] * slots
            for g in node.gpus:
                free[g.index], free_memory[g.index] = g.free_milli, g.free_memory_mib
                memory[g.index], model[g.index] = g.memory_mib, self.model_id[g.model]
            cards = len(node.gpus)
            kind = kinds.setdefault((*model[:cards], *memory[:cards]), len(kinds))
            self.kind.append(kind)
            mixed = mixed or (cards > 1 and model.count(model[0]) < cards)
            key = (kind, node.free_cpu_milli, node.free_memory_mib, *free[:cards], *free_memory[:cards])
            states.append(self._state_ids.setdefault(key, len(self._state_ids)))
            free_rows.append(free)
            free_memory_rows.append(free_memory)
            memory_rows.append(memory)
            model_rows.append(model)

        def grid(rows: list[list[int]]) -> np.ndarray:
            return np.array(rows, dtype=np.int64).reshape(n, slots)

        self.cpu_free = np.array([node.free_cpu_milli for node in self.nodes], dtype=np.int64)
        self.mem_free = np.array([node.free_memory_mib for node in self.nodes], dtype=np.int64)
        self.pool = np.array([self.pool_id[node.pool] for node in self.nodes], dtype=np.int64)
        self.gpu_free = grid(free_rows)
        self.gpu_mem_free = grid(free_memory_rows)
        self.gpu_mem_total = grid(memory_rows)
        self.gpu_model = grid(model_rows)
        self.gpu_idle = self.gpu_free.sum(axis=1)  # free milli of all the node's cards
        self.idle_cards = (self.gpu_free == MILLI_PER_GPU).sum(axis=1)  # cards nobody uses
        self.version = np.ones(n, dtype=np.int64)
        # state[j]: the same number for nodes whose free resources and cards are alike (score alike).
        self.state = np.array(states, dtype=np.int64)
        # Whether some node has cards of more than one model (the fragmentation then counts those card
        # by card; a node's models never change).
        self.mixed_nodes = mixed
        self.cpu_scale = max(1, int(max((node.cpu_milli for node in self.nodes), default=1)))
        self.gpu_scale = max(1, slots * MILLI_PER_GPU)

    def sync(self, j: int, node: NodeState | None = None) -> None:
        """Copy node j's free resources from its NodeState (or from `node`, a view of it: the same
        cards, other free resources)."""
        node = node or self.nodes[j]
        free = [g.free_milli for g in node.gpus]
        free_memory = [g.free_memory_mib for g in node.gpus]
        self.cpu_free[j] = node.free_cpu_milli
        self.mem_free[j] = node.free_memory_mib
        self.gpu_free[j, : len(free)] = free
        self.gpu_mem_free[j, : len(free)] = free_memory
        self.gpu_idle[j] = sum(free)
        self.idle_cards[j] = free.count(MILLI_PER_GPU)
        self.version[j] += 1
        key = (self.kind[j], node.free_cpu_milli, node.free_memory_mib, *free, *free_memory)
        self.state[j] = self._state_ids.setdefault(key, len(self._state_ids))

    @property
    def states(self) -> int:
        """How many distinct node states have been seen (state ids are 0 .. states - 1)."""
        return len(self._state_ids)

    def differs(self, j: int, node: NodeState) -> bool:
        """Whether `node` (a view of node j) has other free resources than row j holds."""
        if self.cpu_free[j] != node.free_cpu_milli or self.mem_free[j] != node.free_memory_mib:
            return True
        return any(
            self.gpu_free[j, g.index] != g.free_milli or self.gpu_mem_free[j, g.index] != g.free_memory_mib
            for g in node.gpus
        )

    def feasible(self, request: RequestSpec) -> tuple[np.ndarray, np.ndarray]:
        """(nodes that can take the request (N,), cards that can hold one slice (N, slots)); callers must
        not change them in place. Kept per request shape, only the nodes changed since are re-checked."""
        shape = (request.cpu_milli, request.memory_mib, request.pools, request.num_gpus)
        shape += (request.gpu_milli, request.models, request.gpu_memory_mib)
        known = self._feasible_by_shape.get(shape)
        if known is None:
            if len(self._feasible_by_shape) >= _FEASIBLE_SHAPES_KEPT:
                del self._feasible_by_shape[next(iter(self._feasible_by_shape))]
            ok, cards = self._feasible(request)
            self._feasible_by_shape[shape] = (self.version.copy(), ok, cards)
            return ok, cards
        version, ok, cards = known
        stale = (version != self.version).nonzero()[0]
        if len(stale):
            ok[stale], cards[stale] = self._feasible(request, stale)
            version[stale] = self.version[stale]
        return ok, cards

    def _feasible(
        self, request: RequestSpec, rows: np.ndarray | slice = slice(None)
    ) -> tuple[np.ndarray, np.ndarray]:
        ok = (self.cpu_free[rows] >= request.cpu_milli) & (self.mem_free[rows] >= request.memory_mib)
        if request.pools:
            ok &= self._in_pools(request.pools)[rows]
        if request.num_gpus == 0:
            return ok, np.zeros((len(ok), self.gpu_free.shape[1]), dtype=bool)
        cards = self.gpu_free[rows] >= request.gpu_milli
        if request.models:
            cards &= self._of_models(request.models)[rows]
        need = self._memory_need(request.gpu_milli, request.gpu_memory_mib)
        cards &= self.gpu_mem_free[rows] >= (need[rows] if isinstance(need, np.ndarray) else need)
        ok &= set_per_row(cards) >= request.num_gpus
        return ok, cards

    def _in_pools(self, pools: frozenset[str]) -> np.ndarray:
        """Rows in those pools (cached: a node's pool does not change)."""
        key = ("pools", pools)
        if key not in self._fixed:
            self._fixed[key] = np.isin(self.pool, [self.pool_id[p] for p in pools if p in self.pool_id])
        return self._fixed[key]

    def _of_models(self, models: frozenset[str]) -> np.ndarray:
        """Card slots holding one of those models (cached)."""
        key = ("models", models)
        if key not in self._fixed:
            allowed = np.array([m in models for m in self.models] + [False])
            self._fixed[key] = allowed[self.gpu_model]
        return self._fixed[key]

    def _memory_need(self, milli: int, memory_mib: int) -> np.ndarray | int:
        """Card memory (MiB) a slice of `milli` needs on each card slot: asked for, or in proportion."""
        if memory_mib:
            return memory_mib
        key = ("memory", milli)
        if key not in self._fixed:
            self._fixed[key] = self.gpu_mem_total * milli // MILLI_PER_GPU
        return self._fixed[key]
