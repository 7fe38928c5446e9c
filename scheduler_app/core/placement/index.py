"""The free-capacity index: the nodes as numpy arrays, and which nodes and cards a request shape fits."""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from ..cluster import MILLI_PER_GPU, NodeState, RequestSpec

_FEASIBLE_SHAPES_KEPT = 512


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
        for node in self.nodes:
            free, free_memory, memory, model = [0] * slots, [0] * slots, [0] * slots, [-1] * slots
            for g in node.gpus:
                free[g.index], free_memory[g.index] = g.free_milli, g.free_memory_mib
                memory[g.index], model[g.index] = g.memory_mib, self.model_id[g.model]
            cards = len(node.gpus)
            kind = kinds.setdefault((*model[:cards], *memory[:cards]), len(kinds))
            self.kind.append(kind)
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
        self.version = np.ones(n, dtype=np.int64)
        # state[j]: the same number for nodes whose free resources and cards are alike (score alike).
        self.state = np.array(states, dtype=np.int64)
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
            n, slots = self.gpu_free.shape
            known = np.full(n, -1, dtype=np.int64), np.empty(n, dtype=bool), np.empty((n, slots), dtype=bool)
            self._feasible_by_shape[shape] = known
        version, ok, cards = known
        recheck_feasible(
            version,
            self.version,
            ok,
            cards,
            (request.cpu_milli, request.memory_mib, request.num_gpus, request.gpu_milli),
            (self.cpu_free, self.mem_free, self.gpu_free, self.gpu_mem_free),
            self._in_pools(request.pools),
            self._of_models(request.models),
            self._memory_need(request.gpu_milli, request.gpu_memory_mib),
        )
        return ok, cards

    def _in_pools(self, pools: frozenset[str]) -> np.ndarray:
        """Rows in those pools, every row for none (cached: a node's pool does not change)."""
        key = ("pools", pools)
        if key not in self._fixed:
            ids = [self.pool_id[p] for p in pools if p in self.pool_id]
            self._fixed[key] = np.isin(self.pool, ids) if pools else np.ones(len(self.pool), dtype=bool)
        return self._fixed[key]

    def _of_models(self, models: frozenset[str]) -> np.ndarray:
        """Card slots holding one of those models, every slot for none (cached)."""
        key = ("models", models)
        if key not in self._fixed:
            allowed = np.array([m in models for m in self.models] + [False])
            self._fixed[key] = (
                allowed[self.gpu_model] if models else np.ones(self.gpu_model.shape, dtype=bool)
            )
        return self._fixed[key]

    def _memory_need(self, milli: int, memory_mib: int) -> np.ndarray:
        """Card memory (MiB) a slice of `milli` needs on each card slot: asked for, or in proportion
        (cached)."""
        key = ("memory", milli, memory_mib)
        if key not in self._fixed:
            if memory_mib:
                self._fixed[key] = np.full(self.gpu_mem_total.shape, memory_mib, dtype=np.int64)
            else:
                self._fixed[key] = self.gpu_mem_total * milli // MILLI_PER_GPU
        return self._fixed[key]


@numba.njit(cache=True, nogil=True)
def recheck_feasible(version, index_version, ok, cards, request, free, in_pool, of_models, need):
    """Re-check the nodes whose version moved since `version` (all, where it is -1): ok[j], whether
    node j can take the request (CPU milli, memory MiB, cards, milli per card); cards[j, c], whether
    its card c can hold one slice. `free`: the index's free CPU, memory, milli and card memory."""
    cpu, memory, num, milli = request
    cpu_free, mem_free, gpu_free, gpu_mem_free = free
    for j in range(len(version)):
        if version[j] == index_version[j]:
            continue
        version[j] = index_version[j]
        count = 0
        for c in range(gpu_free.shape[1]):
            usable = (
                num > 0 and gpu_free[j, c] >= milli and of_models[j, c] and gpu_mem_free[j, c] >= need[j, c]
            )
            cards[j, c] = usable
            count += cards[j, c]
        ok[j] = cpu_free[j] >= cpu and mem_free[j] >= memory and in_pool[j] and count >= num
