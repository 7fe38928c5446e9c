"""Where a request goes: placement policies over plain cluster state.

Two ways in:

* ``choose_placement(nodes, request, policy, workload)`` for a one-off decision;
* ``Placer(nodes, policy, workload)`` for a scheduling pass: it mirrors the
  nodes into numpy arrays once, then each ``place``/``release`` (or ``refresh``
  after the caller changed a node) touches one node, and per-request-shape
  scores are cached per node and per node state, so only the nodes changed
  since that shape was last seen, into a state not scored for it, are rescored.
  ``choose(request, views)`` judges some nodes as other states for one call
  (a reservation's guarded view).

Policies (``POLICIES``, by name):

* ``first-fit``: first node in the given order with room, lowest card indices.
* ``best-fit``: node left with the least free CPU + GPU (each normalised by the
  largest node), tightest cards; the simulator's BestFit.
* ``fgd``: Fragmentation Gradient Descent (Weng et al., ATC 2023): the node and
  card whose fragmentation (see ``fragmentation.py``) grows least.
* ``fgd-plus`` (``DEFAULT_POLICY``): first, do not take the last hosts of a
  scarce gang pinned to GPU models (no other model can stand in for them),
  nor, for a CPU-only request, of any scarce gang;
  then FGD's rank, then, among equally ranked choices: (1) do not take the
  last nodes able to host a rare gang (a multi-card shape at most a tenth of
  the nodes can still host, more when the mix asks for as much CPU per GPU as
  the cluster has: ``scarce_gang_share``);
  (2) a request free to use any model takes the model with the least demand
  pinned to it per free milli (``WorkloadMix.pinned``); (3) the least growth
  of host-aware fragmentation (idle cards count as usable only as far as the
  node's free CPU and memory can feed them), for a CPU-only request counted
  in eighths of a card and then the least free CPU; (4) pack (best-fit).
  Where the mix asks for more CPU per GPU than the cluster has (CPU runs out
  first: ``cpu_pressure`` above 1), a CPU-only request ranks by that count of
  eighths instead of FGD's rank, until every gang shape counts as scarce.
  Task-aware: training packs onto the fullest card; inference only considers
  cards nobody else uses, unless no such card fits anywhere, then it packs.

Every policy checks GPU share and card memory, host CPU and memory, the
request's GPU models and pools. Multi-GPU requests take whole cards on one
node. All choices are deterministic: remaining ties go to the earliest node
in the given order, then the lowest card index. Scores are exact (fixed-point
fragmentation), so a tie is a tie whatever batch the nodes were scored in.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial

import numpy as np

from .cluster import MILLI_PER_GPU, GpuState, NodeState, Placement, RequestSpec
from .fragmentation import FragmentationModel, WorkloadMix
from .mig import mig_placement, release_instances, take_instances

DEFAULT_POLICY = "fgd-plus"
# fgd-plus keeps nodes for a gang shape while at most this share of the nodes can still host it...
SCARCE_GANG_SHARE = 0.1
# ...plus this much more per unit of CPU pressure above CALM_CPU_PRESSURE (see ``scarce_gang_share``).
GANG_SHARE_PER_CPU_PRESSURE = 2.0
CALM_CPU_PRESSURE = 0.9
# A CPU-only request compares the cards it would strand in steps of the smallest share sold.
STRANDED_STEP_MILLI = MILLI_PER_GPU // 8
_DEDUPE_FROM = 64
_FEASIBLE_SHAPES_KEPT = 512


def gpu_fits(request: RequestSpec, gpu: GpuState) -> bool:
    """Whether one card has the share and memory this request needs per card."""
    return gpu.free_milli >= request.gpu_milli and gpu.free_memory_mib >= request.memory_on(gpu)


def node_admits(request: RequestSpec, node: NodeState) -> bool:
    """Host resources, pool and GPU-model constraints, before looking at cards."""
    if request.pools and node.pool not in request.pools:
        return False
    if node.free_cpu_milli < request.cpu_milli or node.free_memory_mib < request.memory_mib:
        return False
    return not request.models or not request.num_gpus or any(g.model in request.models for g in node.gpus)


def candidate_gpus(request: RequestSpec, node: NodeState) -> list[GpuState]:
    """Cards on this node that could hold one slice of the request."""
    return [
        g for g in node.gpus if (not request.models or g.model in request.models) and gpu_fits(request, g)
    ]


def first_fit(nodes: Sequence[NodeState], request: RequestSpec) -> Placement | None:
    """The first node (in the given order) with enough cards, lowest indices first."""
    for node in nodes:
        if not node_admits(request, node):
            continue
        if request.num_gpus == 0:
            return Placement(request.id, node.name, (), 0, 0)
        gpus = candidate_gpus(request, node)
        if len(gpus) >= request.num_gpus:
            chosen = gpus[: request.num_gpus]
            return Placement(
                request.id,
                node.name,
                tuple(g.index for g in chosen),
                request.gpu_milli,
                request.memory_on(chosen[0]),
            )
    return None


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
        ok &= cards.sum(axis=1) >= request.num_gpus
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


def _first_cards(cards: np.ndarray, num: int) -> np.ndarray:
    """Per row, the lowest-index `num` usable cards (boolean mask)."""
    return cards & (np.cumsum(cards, axis=1) <= num)


def _first_of_each(values: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct value (in the order of the values)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    return order[np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))]


def _lexmin(mask: np.ndarray, *keys: np.ndarray) -> int | None:
    """Index of the masked row with the smallest keys (first key most significant), earliest on ties."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return None
    for key in keys:
        values = key[rows]
        rows = rows[values == values.min()]
        if len(rows) == 1:
            break
    return int(rows[0])


class Policy:
    """Chooses (node row, card indices) for a request on a ClusterIndex, or None."""

    def __init__(self, index: ClusterIndex, workload: WorkloadMix | None = None) -> None:
        self.index = index

    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        raise NotImplementedError


class FirstFit(Policy):
    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        ok, cards = self.index.feasible(request)
        j = _lexmin(ok)
        if j is None:
            return None
        return j, tuple(int(c) for c in np.flatnonzero(cards[j])[: request.num_gpus])


class BestFit(Policy):
    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        ix = self.index
        ok, cards = ix.feasible(request)
        left = (ix.cpu_free - request.cpu_milli) / ix.cpu_scale + (
            ix.gpu_idle - request.total_milli()
        ) / ix.gpu_scale
        j = _lexmin(ok, left)
        if j is None:
            return None
        usable = np.flatnonzero(cards[j])
        tightest = usable[np.argsort(ix.gpu_free[j, usable], kind="stable")]
        return j, tuple(int(c) for c in tightest[: request.num_gpus])


class _ShapeScores:
    """Cached per-node scores for one request shape: valid where version matches the index.

    Scores are a function of the node state and the request shape alone, so they are also kept per
    state id (``known``, ``state_*``): a node reaching a state another node was scored in costs no
    rescoring.
    """

    def __init__(self, n: int) -> None:
        self.version = np.full(n, -1, dtype=np.int64)
        self.score = np.zeros(n, dtype=np.float64)
        self.host = np.zeros(n, dtype=np.float64)
        self.card = np.full(n, -1, dtype=np.int64)
        self.known = np.zeros(0, dtype=bool)
        self.state_score = np.zeros(0, dtype=np.float64)
        self.state_host = np.zeros(0, dtype=np.float64)
        self.state_card = np.zeros(0, dtype=np.int64)

    def cover(self, states: int) -> None:
        """Make room for state ids below `states` (doubling, so growing is rare)."""
        if len(self.known) >= states:
            return
        grow = max(states, 2 * len(self.known)) - len(self.known)
        self.known = np.concatenate([self.known, np.zeros(grow, dtype=bool)])
        self.state_score = np.concatenate([self.state_score, np.zeros(grow)])
        self.state_host = np.concatenate([self.state_host, np.zeros(grow)])
        self.state_card = np.concatenate([self.state_card, np.zeros(grow, dtype=np.int64)])


class Fgd(Policy):
    """FGD as the paper's simulator runs it.

    A candidate's score is int(100 * sigmoid(-increase / 1000)): the
    fragmentation increase in GPUs squashed to the scheduler's 0..100 integer
    node score. Within a node the card with the best score wins (lowest index
    on ties), across nodes the best score (earliest node on ties). The integer
    rounding matters: increases within ~40 milli-GPU tie, and ties go to the
    earliest node, which packs; scoring the raw increase instead leaves about
    half a point more GPU unallocated on the Alibaba trace.
    """

    pack = False

    def __init__(self, index: ClusterIndex, workload: WorkloadMix | None = None) -> None:
        super().__init__(index, workload)
        self.model = FragmentationModel(
            workload or WorkloadMix(), index.models, mixed_nodes=index.mixed_nodes
        )
        self.cache: dict[tuple, _ShapeScores] = {}
        self.current: tuple[np.ndarray, ...] = ()  # ``_frag`` of each state id, where known
        self.current_known = np.zeros(0, dtype=bool)

    @staticmethod
    def _rank(increase: np.ndarray) -> np.ndarray:
        """Lower is better: minus the simulator's integer node score."""
        return -np.floor(100 / (1 + np.exp(increase / 1000)))

    def _cards(self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray) -> tuple[np.ndarray, bool]:
        return cards, False

    def _left(self, request: RequestSpec, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Free CPU + GPU each node (of `rows`) would keep, normalised (best-fit: lower packs tighter)."""
        ix = self.index
        gpu_left = ix.gpu_idle[rows] - request.total_milli()
        return (ix.cpu_free[rows] - request.cpu_milli) / ix.cpu_scale + gpu_left / ix.gpu_scale

    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        ix = self.index
        ok, cards = ix.feasible(request)
        if not ok.any():
            return None
        cards, isolated = self._cards(request, ok, cards)
        if isolated:
            ok = ok & cards.any(axis=1)
        key = (
            request.cpu_milli,
            request.memory_mib,
            request.gpu_milli,
            request.num_gpus,
            request.gpu_memory_mib,
            request.models,
            isolated,
        )
        scores = self.cache.get(key)
        if scores is None:
            scores = self.cache[key] = _ShapeScores(len(ix.nodes))
        stale = (ok & (scores.version != ix.version)).nonzero()[0]
        if len(stale):
            self._rescore(request, stale, cards[stale], scores)
        j = self._select(request, ok, cards, scores)
        if j is None:
            return None
        if request.num_gpus == 1:
            return j, (int(scores.card[j]),)
        return j, tuple(int(c) for c in np.flatnonzero(cards[j])[: request.num_gpus])

    def _select(
        self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray, scores: _ShapeScores
    ) -> int | None:
        return _lexmin(ok, scores.score)

    def _rescore(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: _ShapeScores
    ) -> None:
        """Score the rows: each node state not yet scored for this shape once, the rest from memory."""
        ix = self.index
        scores.cover(ix.states)
        states = ix.state[rows]
        new = (~scores.known[states]).nonzero()[0]
        if len(new):
            unique = states[new]
            if len(set(unique.tolist())) < len(new):  # (a handful of rows: cheaper than np.unique)
                unique, first = np.unique(unique, return_index=True)
                new = new[first]
            scored = rows[new]
            self._rescore_rows(request, scored, cards[new], scores)
            scores.state_score[unique] = scores.score[scored]
            scores.state_host[unique] = scores.host[scored]
            scores.state_card[unique] = scores.card[scored]
            scores.known[unique] = True
            if len(new) == len(rows):  # every row was scored just now
                return
        scores.score[rows] = scores.state_score[states]
        scores.host[rows] = scores.state_host[states]
        scores.card[rows] = scores.state_card[states]
        scores.version[rows] = ix.version[rows]

    def _rescore_rows(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: _ShapeScores
    ) -> None:
        ix = self.index
        if request.num_gpus == 1:
            r, c = np.nonzero(cards)
            at = rows[r]
            free = ix.gpu_free[at, c]
            # Cards of a node with the same free share and model leave it in the same state (its
            # fragmentation does not depend on the cards' order): each such state is scored once, as
            # its lowest card.
            alike = (r * (MILLI_PER_GPU + 1) + free) * (len(ix.models) + 1) + ix.gpu_model[at, c]
            first = _first_of_each(alike)
            fr, fc, at = r[first], c[first], at[first]
            take = np.zeros((len(fr), cards.shape[1]), dtype=np.int64)
            take[np.arange(len(fr)), fc] = request.gpu_milli
            before, after = self._before_and_after(request, rows, at, take)
            rank, host = self._ranks(request, tuple(f[fr] for f in before), after)
            # Per node the best card: lowest rank, then (packing) secondary key and least free share
            # left, then lowest index.
            keys = (fc, free[first], host, rank, fr) if self.pack else (fc, rank, fr)
            order = np.lexsort(keys)
            node = fr[order]
            best = order[(node != np.concatenate(([-1], node[:-1]))).nonzero()[0]]  # first per node
            at = at[best]
            scores.card[at] = fc[best]
            scores.score[at], scores.host[at] = rank[best], host[best]
        else:
            take = _first_cards(cards, request.num_gpus) * request.gpu_milli if request.num_gpus else None
            before, after = self._before_and_after(request, rows, rows, take)
            scores.score[rows], scores.host[rows] = self._ranks(request, before, after)
        scores.version[rows] = ix.version[rows]

    def _frag(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray, mem: np.ndarray) -> tuple:
        """The fragmentation measures this policy ranks by, for K node states."""
        return (self.model.batch(cpu, gpu, model),)

    def _before_and_after(
        self, request: RequestSpec, rows: np.ndarray, at: np.ndarray, take: np.ndarray | None
    ) -> tuple[tuple, tuple]:
        """(``_frag`` of the rows' current states, ``_frag`` of K states after the request), in one
        batch: after-state k is node at[k] with the request's CPU and memory and take[k]'s milli per
        card (none if None) taken. Each node state's current fragmentation is computed once, ever.
        The rows are in distinct states."""
        ix = self.index
        states = ix.state[rows]
        if len(self.current_known) < ix.states:
            grow = max(ix.states, 2 * len(self.current_known)) - len(self.current_known)
            self.current_known = np.concatenate([self.current_known, np.zeros(grow, dtype=bool)])
            self.current = tuple(np.concatenate([c, np.zeros(grow)]) for c in self.current)
        unknown_at = ~self.current_known[states]  # (the rows' states are distinct: see _rescore)
        new = rows[unknown_at]
        # The current states not yet known first, then the after-states.
        both = np.concatenate([new, at]) if len(new) else at
        cpu, mem, gpu = ix.cpu_free[both], ix.mem_free[both], ix.gpu_free[both]
        k = len(new)
        cpu[k:] -= request.cpu_milli
        mem[k:] -= request.memory_mib
        if take is not None:
            gpu[k:] -= take
        values = self._frag(cpu, gpu, ix.gpu_model[both], mem)
        if not k:
            return tuple(known[states] for known in self.current), values
        if not self.current:
            self.current = tuple(np.zeros(len(self.current_known)) for _ in values)
        unknown = states[unknown_at]
        for known, value in zip(self.current, values, strict=True):
            known[unknown] = value[:k]
        self.current_known[unknown] = True
        return tuple(known[states] for known in self.current), tuple(v[k:] for v in values)

    def _ranks(self, request: RequestSpec, before: tuple, after: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(FGD rank, secondary key; lower is better) of moving node states from `before` to `after`."""
        rank = self._rank(after[0] - before[0])
        return rank, np.zeros_like(rank)


class _GangRoom:
    """Which nodes could still host each gang shape (whole cards, CPU, memory), kept per node version."""

    def __init__(self, index: ClusterIndex, gangs: tuple, share: float) -> None:
        self.index = index
        self.cpu = np.array([s.cpu_milli for s, _ in gangs], dtype=np.int64)
        self.mem = np.array([m for _, m in gangs], dtype=np.int64)
        self.num = np.array([s.num_gpus for s, _ in gangs], dtype=np.int64)
        self.num_col, self.cpu_col, self.mem_col = self.num[:, None], self.cpu[:, None], self.mem[:, None]
        self.eligible = np.array(
            [[not s.models or m in s.models for m in index.models] + [False] for s, _ in gangs], dtype=bool
        ).reshape(len(gangs), len(index.models) + 1)
        self.any_model = bool(self.eligible[:, :-1].all())
        # Gang shapes pinned to GPU models: no other model's nodes can stand in for their hosts.
        self.pinned = np.array([bool(s.models) for s, _ in gangs], dtype=bool)
        self.can = np.zeros((len(gangs), len(index.nodes)), dtype=bool)
        self.hosts = np.zeros(len(gangs), dtype=np.int64)
        self.scarce_limit = max(1, share * len(index.nodes))
        self.version = np.full(len(index.nodes), -1, dtype=np.int64)
        # The gang shapes with at most scarce_limit hosts, 1 / their hosts, and per node whether it
        # hosts any of them (updated with `can`).
        self.scarce = np.zeros(0, dtype=np.int64)
        self.scarce_weight = np.zeros(0)
        self.hosts_scarce = np.zeros(len(index.nodes), dtype=bool)
        # Per request shape: the gang shapes each node would stop hosting (see _KnownLoss).
        self._lost: dict[tuple, _KnownLoss] = {}

    def _hosts(self, cpu: np.ndarray, mem: np.ndarray, count: np.ndarray) -> np.ndarray:
        """can[g, k]: node state k has the CPU, memory and whole cards (`count`, see `_whole`) for gang
        shape g."""
        return (count >= self.num_col) & (cpu[None, :] >= self.cpu_col) & (mem[None, :] >= self.mem_col)

    def _whole(self, whole: np.ndarray, model: np.ndarray) -> np.ndarray:
        """count[g, k]: the whole cards of node state k (`whole` per card) gang shape g may use; one
        row for all shapes when every shape may use any model (a missing card is never whole)."""
        if self.any_model:
            return whole.sum(axis=1)[None, :]
        return (whole[None, :, :] & self.eligible[:, model]).sum(axis=2)

    def cost(
        self,
        request: RequestSpec,
        rows: np.ndarray,
        taken_at: Callable[[np.ndarray], np.ndarray],
        shape: Hashable,
        pinned_only: bool = False,
    ) -> np.ndarray:
        """Per candidate row: the scarce gang shapes (only those pinned to models if `pinned_only`) it
        would stop hosting, each weighted 1 / its hosts. `taken_at(rows)`: the cards the request
        would take at those rows; `shape`: a key under which those cards depend only on the node's
        state (the policy's request shape)."""
        self._refresh()
        ix = self.index
        cost = np.zeros(len(rows))
        scarce, weight = self.scarce, self.scarce_weight
        if pinned_only:
            keep = self.pinned[scarce]
            scarce, weight = scarce[keep], weight[keep]
            hit = np.flatnonzero(self.can[scarce[:, None], rows].any(axis=0))
        else:
            hit = self.hosts_scarce[rows].nonzero()[0]
        if not len(hit):
            return cost
        sub = rows[hit]
        known = self._lost.get(shape)
        if known is None:
            known = self._lost[shape] = _KnownLoss(len(self.num), len(ix.nodes))
        version = ix.version[sub]
        redo = (known.version[sub] != version).nonzero()[0]
        if len(redo):
            at = sub[redo]
            after = self._hosts(
                ix.cpu_free[at] - request.cpu_milli,
                ix.mem_free[at] - request.memory_mib,
                self._whole((ix.gpu_free[at] == MILLI_PER_GPU) & ~taken_at(at), ix.gpu_model[at]),
            )
            known.lost[:, at] = self.can[:, at] & ~after
            known.version[at] = version[redo]
        cost[hit] = _weighted_sum(weight, known.lost[scarce[:, None], sub])
        return cost

    def _refresh(self) -> None:
        """Bring `can`, the host counts and the scarce shapes up to the nodes' versions."""
        ix = self.index
        stale = (self.version != ix.version).nonzero()[0]
        if not len(stale):
            return
        self.version[stale] = ix.version[stale]
        if self.any_model:
            count = ix.idle_cards[stale][None, :]
        else:
            count = self._whole(ix.gpu_free[stale] == MILLI_PER_GPU, ix.gpu_model[stale])
        can = self._hosts(ix.cpu_free[stale], ix.mem_free[stale], count)
        was = self.can[:, stale]
        if (can == was).all():  # most placements leave every gang shape's hosts as they were
            return
        self.hosts += can.sum(axis=1) - was.sum(axis=1)
        self.can[:, stale] = can
        scarce = (self.hosts <= self.scarce_limit).nonzero()[0]
        if np.array_equal(scarce, self.scarce):
            self.hosts_scarce[stale] = can[scarce].any(axis=0)
        else:
            self.scarce = scarce
            self.hosts_scarce = self.can[scarce].any(axis=0)
        self.scarce_weight = 1 / np.maximum(self.hosts[scarce], 1)


class _KnownLoss:
    """For one request shape: lost[g, j], node j would stop hosting gang shape g if the request took
    its cards there; valid while node j is at `version[j]`. (What a node loses depends on its state,
    the request's CPU and memory and the cards, which its state fixes; not on which shapes are
    scarce now.)"""

    def __init__(self, gangs: int, n: int) -> None:
        self.version = np.full(n, -1, dtype=np.int64)
        self.lost = np.zeros((gangs, n), dtype=bool)


class FgdPlus(Fgd):
    """FGD whose ties go to gang room, model pressure, host-aware fragmentation, then packing;
    task-aware cards; before FGD's rank, room for scarce gangs pinned to GPU models, and for every
    scarce gang where a CPU-only request is placed.

    FGD's rank stays first: ranking by host-aware fragmentation outright
    scatters pods onto CPU-rich nodes and breaks the few that big gangs need.
    Training packs: among equally ranked cards, the one left fullest.
    Inference spreads for isolation: only cards nobody uses are candidates,
    unless none fits anywhere, then it packs like training.
    """

    pack = True

    def __init__(self, index: ClusterIndex, workload: WorkloadMix | None = None) -> None:
        super().__init__(index, workload)
        mix = workload or WorkloadMix()
        self.host_model = FragmentationModel(
            mix, index.models, host_aware=True, mixed_nodes=index.mixed_nodes
        )
        share = scarce_gang_share(index, mix)
        self.gangs = _GangRoom(index, mix.gangs, share) if mix.gangs else None
        self.pinned = _pinned_demand(index, mix.pinned)
        # Where CPU runs out before GPU (pressure above 1), a CPU-only request ranks by the cards it
        # would strand (host-aware growth in eighths) instead of by FGD's rank, which sees the CPU it
        # takes only once cards are stranded; until every gang shape is scarce (share 1), where the
        # gang room before the rank decides and FGD's rank did better (bench/README "Strand first").
        self.strand_first = cpu_pressure(index, mix) > 1.0 and share < 1.0

    def _frag(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray, mem: np.ndarray) -> tuple:
        if len(cpu) <= _DEDUPE_FROM:
            return self.host_model.batch_pair(cpu, gpu, model, mem)
        # Rescoring many nodes at once: many are in the same state (untouched nodes of one kind).
        states = np.concatenate([cpu[:, None], mem[:, None], gpu, model], axis=1)
        order = np.lexsort(states.T)
        ordered = states[order]
        first = np.ones(len(states), dtype=bool)
        first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
        inverse = np.empty(len(states), dtype=np.int64)
        inverse[order] = np.cumsum(first) - 1
        unique = ordered[first]
        g = gpu.shape[1]
        plain, host = self.host_model.batch_pair(
            unique[:, 0], unique[:, 2 : 2 + g], unique[:, 2 + g :], unique[:, 1]
        )
        return plain[inverse], host[inverse]

    def _ranks(self, request: RequestSpec, before: tuple, after: tuple) -> tuple[np.ndarray, np.ndarray]:
        # The host-aware increase stays raw, not rounded like FGD's rank: it only orders FGD's ties...
        host = after[1] - before[1]
        if self.strand_first and request.num_gpus == 0:
            # ...except for a CPU-only request under CPU pressure, which ranks by it (see __init__).
            return np.floor(host / STRANDED_STEP_MILLI), host
        return self._rank(after[0] - before[0]), host

    def _select(
        self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray, scores: _ShapeScores
    ) -> int | None:
        rows = np.flatnonzero(ok)
        if not len(rows):
            return None
        cpu_only = request.num_gpus == 0
        taken_at = partial(self._taken, request, cards=cards, scores=scores)
        if len(rows) > 1 and self.gangs is not None and (cpu_only or self.gangs.pinned.any()):
            # Before FGD's rank: a scarce gang pinned to a model loses hosts no other model can replace;
            # and FGD's rank sees a CPU-only request take a gang's CPU only once cards are stranded.
            cost = self.gangs.cost(request, rows, taken_at, scores, pinned_only=not cpu_only)
            rows = rows[cost == cost.min()]
        score = scores.score[rows]
        rows = rows[score == score.min()]
        if len(rows) > 1 and self.gangs is not None and not cpu_only:
            cost = self.gangs.cost(request, rows, taken_at, scores)
            rows = rows[cost == cost.min()]
        if len(rows) > 1 and self.pinned is not None and request.num_gpus and not request.models:
            pressure = self._model_pressure(request, rows, cards, scores)
            rows = rows[pressure == pressure.min()]
        if len(rows) > 1 and cpu_only:
            rows = self._tightest_cpu(rows, scores)
        if len(rows) > 1:
            host = scores.host[rows]
            rows = rows[host == host.min()]
        if len(rows) > 1:
            left = self._left(request, rows)
            rows = rows[left == left.min()]
        return int(rows[0])

    def _tightest_cpu(self, rows: np.ndarray, scores: _ShapeScores) -> np.ndarray:
        """For a CPU-only request: of the rows that strand the fewest cards (host-aware growth in
        eighths of a card), those with the least free CPU, so the large blocks of free CPU that
        CPU-hungry GPU requests and gangs need stay whole."""
        stranded = np.floor(scores.host[rows] / STRANDED_STEP_MILLI)
        rows = rows[stranded == stranded.min()]
        cpu = self.index.cpu_free[rows]
        return rows[cpu == cpu.min()]

    @staticmethod
    def _taken(request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: _ShapeScores) -> np.ndarray:
        """Per candidate row, the cards the request would take there."""
        if request.num_gpus > 1:
            return _first_cards(cards[rows], request.num_gpus)
        taken = np.zeros((len(rows), cards.shape[1]), dtype=bool)
        if request.num_gpus:
            taken[np.arange(len(rows)), scores.card[rows]] = True
        return taken

    def _model_pressure(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: _ShapeScores
    ) -> np.ndarray:
        """Per candidate row: how much constrained demand wants the model of the card(s) it would take,
        per free milli of that model now (an unconstrained request should use the least wanted)."""
        ix = self.index
        cards_of = ix.gpu_model >= 0
        free = np.bincount(ix.gpu_model[cards_of], weights=ix.gpu_free[cards_of], minlength=len(ix.models))
        pressure = np.append(self.pinned / np.maximum(free, 1), np.inf)
        card = scores.card[rows] if request.num_gpus == 1 else np.argmax(cards[rows], axis=1)
        return pressure[ix.gpu_model[rows, card]]

    def _cards(self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray) -> tuple[np.ndarray, bool]:
        if request.task_type != "inference" or request.num_gpus == 0:
            return cards, False
        idle = cards & (self.index.gpu_free == MILLI_PER_GPU)
        if (ok & (idle.sum(axis=1) >= request.num_gpus)).any():
            return idle, True
        return cards, False


def cpu_pressure(index: ClusterIndex, mix: WorkloadMix) -> float:
    """The mix's CPU per GPU over the cluster's: at 1 the requests run out of CPU when they run out
    of GPU. 0 when the cluster has no card or the mix asks for no CPU."""
    cards = int((index.gpu_model >= 0).sum())
    if not cards or not mix.cpu_per_gpu:
        return 0.0
    return mix.cpu_per_gpu / (sum(node.cpu_milli for node in index.nodes) / (cards * MILLI_PER_GPU))


def scarce_gang_share(index: ClusterIndex, mix: WorkloadMix) -> float:
    """The share of the nodes under which fgd-plus keeps room for a gang shape.

    Under CPU pressure (``cpu_pressure``) CPU-only and CPU-heavy requests eat the CPU of nodes
    whose cards are idle, so gangs (which need a node's CPU with its cards) lose their hosts all at
    once, late. The share is SCARCE_GANG_SHARE up to CALM_CPU_PRESSURE (the Alibaba trace is at
    0.82), then grows by GANG_SHARE_PER_CPU_PRESSURE per unit (0.3 at 1.0, all gang shapes from 1.35).
    """
    pressure = cpu_pressure(index, mix)
    return min(1.0, SCARCE_GANG_SHARE + GANG_SHARE_PER_CPU_PRESSURE * max(0.0, pressure - CALM_CPU_PRESSURE))


def _pinned_demand(index: ClusterIndex, pinned: tuple) -> np.ndarray | None:
    """Per model of the index: the share of GPU demand constrained to it (a set of models splits its
    share by the cards each has), or None when nothing is constrained to a model here."""
    cards = np.bincount(index.gpu_model[index.gpu_model >= 0], minlength=len(index.models))
    demand = np.zeros(len(index.models))
    for models, share in pinned:
        ids = [index.model_id[m] for m in models if m in index.model_id]
        if ids and cards[ids].sum():
            demand[ids] += share * cards[ids] / cards[ids].sum()
    return demand if demand.any() else None


def _weighted_sum(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per column k, the sum over i of weights[i] * values[i, k], each column summed alone as one
    contiguous row, so a column's result does not depend on the others. (A BLAS product, or a sum
    down the columns, rounds a column differently by the batch's size and its place in it.)"""
    return (np.ascontiguousarray(values.T) * weights[None, :]).sum(axis=1)


POLICIES: dict[str, type[Policy]] = {
    "first-fit": FirstFit,
    "best-fit": BestFit,
    "fgd": Fgd,
    "fgd-plus": FgdPlus,
}


class Placer:
    """A policy bound to one cluster state for a scheduling pass; it mutates the given NodeStates."""

    def __init__(
        self, nodes: Sequence[NodeState], policy: str = DEFAULT_POLICY, workload: WorkloadMix | None = None
    ) -> None:
        try:
            factory = POLICIES[policy]
        except KeyError:
            raise ValueError(f"unknown placement policy {policy!r}; choose from {sorted(POLICIES)}") from None
        self.index = ClusterIndex(nodes)
        self.policy = factory(self.index, workload)

    def choose(self, request: RequestSpec, views: Mapping[str, NodeState] | None = None) -> Placement | None:
        """Where the request would go now; None when it fits nowhere. Changes nothing.

        views: nodes to judge as these states instead (by name; a reservation's guarded view), as
        if the Placer had been built on them; the index is back on the nodes afterwards.
        """
        index = self.index
        seen = [(j, view) for name, view in (views or {}).items() if (j := index.row.get(name)) is not None]
        seen = [(j, view) for j, view in seen if index.differs(j, view)]
        for j, view in seen:
            index.sync(j, view)
        try:
            choice = self.policy.choose(request)
        finally:
            for j, _ in seen:
                index.sync(j)
        if choice is None:
            return None
        j, cards = choice
        node = self.index.nodes[j]
        if request.num_gpus == 0:
            return Placement(request.id, node.name, (), 0, 0)
        if node.gpus[cards[0]].mig is not None:
            return mig_placement(request, node, cards)
        return Placement(
            request.id, node.name, cards, request.gpu_milli, request.memory_on(node.gpus[cards[0]])
        )

    def fits(self, request: RequestSpec) -> bool:
        """Whether the request fits on some node now (as `choose` would find, ignoring the policy)."""
        return bool(self.index.feasible(request)[0].any())

    def place(self, request: RequestSpec) -> Placement | None:
        """Choose and take the resources; None (and no change) when it fits nowhere."""
        placement = self.choose(request)
        if placement is not None:
            self.apply(request, placement)
        return placement

    def apply(self, request: RequestSpec, placement: Placement) -> None:
        j = self.index.row[placement.node]
        apply_placement(self.index.nodes[j], request, placement)
        self.index.sync(j)

    def refresh(self, node: str, state: NodeState | None = None) -> None:
        """Read a node's free resources again after the caller changed its NodeState, or replaced it
        with `state` (a copy the caller changes from now on); a no-op for a node this Placer does not
        hold."""
        j = self.index.row.get(node)
        if j is not None:
            if state is not None:
                self.index.nodes[j] = state
            self.index.sync(j)

    def release(self, request: RequestSpec, placement: Placement) -> None:
        j = self.index.row[placement.node]
        release_placement(self.index.nodes[j], request, placement)
        self.index.sync(j)


def choose_placement(
    nodes: Sequence[NodeState],
    request: RequestSpec,
    policy: str = "first-fit",
    workload: WorkloadMix | None = None,
) -> Placement | None:
    """Run the named policy once; None when the request fits nowhere right now.

    `workload` is the mix of typical request shapes the fgd policies protect
    (``WorkloadMix.from_requests(recent_requests)``); without it they fall back
    to their tie-breaks. For many decisions over the same nodes use ``Placer``.
    """
    return Placer(nodes, policy, workload).choose(request)


def apply_placement(node: NodeState, request: RequestSpec, placement: Placement) -> None:
    """Take the placement's resources from the node (the caller checked it fits)."""
    node.free_cpu_milli -= request.cpu_milli
    node.free_memory_mib -= request.memory_mib
    if placement.mig:
        take_instances(node, placement)
        return
    for index in placement.gpus:
        gpu = node.gpus[index]
        gpu.free_milli -= placement.milli
        gpu.free_memory_mib -= placement.gpu_memory_mib
        assert 0 <= gpu.free_milli <= MILLI_PER_GPU, "over-commit in the pure core"


def release_placement(node: NodeState, request: RequestSpec, placement: Placement) -> None:
    """Give the placement's resources back to the node."""
    node.free_cpu_milli += request.cpu_milli
    node.free_memory_mib += request.memory_mib
    if placement.mig:
        release_instances(node, placement)
        return
    for index in placement.gpus:
        gpu = node.gpus[index]
        gpu.free_milli += placement.milli
        gpu.free_memory_mib += placement.gpu_memory_mib
