"""``fgd``: Fragmentation Gradient Descent (Weng et al., ATC 2023): the node and card whose
fragmentation (see ``fragmentation.py``) grows least."""

from __future__ import annotations

import numpy as np

from ..cluster import MILLI_PER_GPU, RequestSpec
from ..fragmentation import FragmentationModel, WorkloadMix
from .index import ClusterIndex, set_per_row
from .policy import Policy, first_cards, first_of_each, lexmin


class ShapeScores:
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
        self.cache: dict[tuple, ShapeScores] = {}
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
            ok = ok & (set_per_row(cards) > 0)
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
            scores = self.cache[key] = ShapeScores(len(ix.nodes))
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
        self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray, scores: ShapeScores
    ) -> int | None:
        return lexmin(ok, scores.score)

    def _rescore(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores
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
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores
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
            first = first_of_each(alike)
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
            take = first_cards(cards, request.num_gpus) * request.gpu_milli if request.num_gpus else None
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
