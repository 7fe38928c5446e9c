"""``fgd``: Fragmentation Gradient Descent (Weng et al., ATC 2023): the node and card whose
fragmentation (see ``fragmentation.py``) grows least."""

from __future__ import annotations

import numba
import numpy as np

from ..cluster import RequestSpec
from ..fragmentation import FragmentationModel, WorkloadMix, card_increases, current_fragmentation
from .index import ClusterIndex
from .policy import Policy, first_cards, least


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
    host_aware = False  # whether the ranks read the host-aware fragmentation

    def __init__(self, index: ClusterIndex, workload: WorkloadMix | None = None) -> None:
        super().__init__(index, workload)
        self.fragmentation = FragmentationModel(workload or WorkloadMix(), index.models, self.host_aware)
        self.cache: dict[tuple, ShapeScores] = {}
        # card_increases' scratch: each candidate card's row position, card and free milli.
        self.picked = np.empty((3, index.gpu_free.size), dtype=np.int64)
        # The fragmentation of each node state id as it is now (FGD's, host-aware), where known.
        self.current_known = np.zeros(0, dtype=bool)
        self.current_plain = np.zeros(0)
        self.current_host = np.zeros(0)

    @staticmethod
    def _rank(increase: np.ndarray) -> np.ndarray:
        """Lower is better: minus the simulator's integer node score."""
        return -np.floor(100 / (1 + np.exp(increase / 1000)))

    def _cards(
        self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """(The rows that may take the request, the cards it may use there, whether those are only the
        cards nobody uses): FGD's are the feasible ones."""
        return ok, cards, False

    def _left(self, request: RequestSpec, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Free CPU + GPU each node (of `rows`) would keep, normalised (best-fit: lower packs tighter)."""
        ix = self.index
        gpu_left = ix.gpu_idle[rows] - request.total_milli()
        return (ix.cpu_free[rows] - request.cpu_milli) / ix.cpu_scale + gpu_left / ix.gpu_scale

    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        ix = self.index
        ok, cards = ix.feasible(request)
        ok, cards, isolated = self._cards(request, ok, cards)
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
        rows, stale = candidates(ok, scores.version, ix.version)
        if not len(rows):
            return None
        if len(stale):
            self._rescore(request, stale, cards[stale], scores)
        j = self._select(request, rows, cards, scores)
        if request.num_gpus == 1:
            return j, (int(scores.card[j]),)
        return j, tuple(int(c) for c in np.flatnonzero(cards[j])[: request.num_gpus])

    def _select(self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores) -> int:
        """The row to place on, of the candidate rows (not empty, ascending), scored."""
        return int(least(rows, scores.score)[0])

    def _rescore(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores
    ) -> None:
        """Score the rows: each node state not yet scored for this shape once, the rest from memory."""
        ix = self.index
        scores.cover(ix.states)
        new = first_of_unknown_states(rows, ix.state, scores.known)
        if len(new):
            self._rescore_rows(request, rows[new], cards[new], scores)
        share_state_scores(
            rows,
            new,
            ix.state,
            ix.version,
            (scores.score, scores.host, scores.card, scores.version),
            (scores.state_score, scores.state_host, scores.state_card),
        )

    def _rescore_rows(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores
    ) -> None:
        ix = self.index
        before = self._current(rows)
        if request.num_gpus == 1:
            increase = card_increases(
                rows,
                cards,
                (request.cpu_milli, request.memory_mib, request.gpu_milli),
                ix.cpu_free,
                ix.mem_free,
                ix.gpu_free,
                ix.gpu_model,
                self.fragmentation.kernel(),
                before,
                self.picked,
            )
            rank, host = self._ranks(request, increase[0], increase[1])
            keep_best_cards(
                rows, self.picked, rank, host, self.pack, (scores.score, scores.host, scores.card)
            )
        else:
            cpu, mem, gpu = ix.cpu_free[rows], ix.mem_free[rows], ix.gpu_free[rows]
            cpu -= request.cpu_milli
            mem -= request.memory_mib
            if request.num_gpus:
                gpu -= first_cards(cards, request.num_gpus) * request.gpu_milli
            plain, host = self.fragmentation.batch_pair(cpu, gpu, ix.gpu_model[rows], mem)
            scores.score[rows], scores.host[rows] = self._ranks(request, plain - before[0], host - before[1])
        scores.version[rows] = ix.version[rows]

    def _current(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(FGD's, host-aware) fragmentation of the rows as they are now; each node state is computed
        once, ever."""
        ix = self.index
        if len(self.current_known) < ix.states:
            grow = max(ix.states, 2 * len(self.current_known)) - len(self.current_known)
            self.current_known = np.concatenate([self.current_known, np.zeros(grow, dtype=bool)])
            self.current_plain = np.concatenate([self.current_plain, np.zeros(grow)])
            self.current_host = np.concatenate([self.current_host, np.zeros(grow)])
        return current_fragmentation(
            rows,
            ix.state,
            ix.cpu_free,
            ix.mem_free,
            ix.gpu_free,
            ix.gpu_model,
            self.fragmentation.kernel(),
            self.current_known,
            self.current_plain,
            self.current_host,
        )

    def _ranks(
        self, request: RequestSpec, plain: np.ndarray, host: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FGD rank, secondary key; lower is better) of candidates whose FGD fragmentation grows by
        `plain` and host-aware fragmentation by `host`."""
        rank = self._rank(plain)
        return rank, np.zeros_like(rank)


@numba.njit(cache=True, nogil=True)
def keep_best_cards(rows, picked, rank, host, pack, scores):
    """Of the candidate cards (`picked`: row position, card, free milli; grouped by row, ascending, and
    by card within a row), each row's best goes in its `scores` (score, host, card): lowest rank,
    then (packing) lowest host-aware growth and least free share, then lowest card. A row's first
    candidate is written, then each better one over it."""
    score, host_of, card_of = scores
    b = 0
    for i in range(len(rank)):
        first = i == 0 or picked[0, i] != picked[0, b]
        if (
            first
            or rank[i] < rank[b]
            or (
                pack
                and rank[i] == rank[b]
                and (host[i] < host[b] or (host[i] == host[b] and picked[2, i] < picked[2, b]))
            )
        ):
            b = i
            row = rows[picked[0, b]]
            score[row], host_of[row], card_of[row] = rank[b], host[b], picked[1, b]


@numba.njit(cache=True, nogil=True)
def candidates(ok, scored, version):
    """(The rows that can take the request, ascending; those of them whose scores are stale.)"""
    rows = np.empty(len(ok), dtype=np.int64)
    stale = np.empty(len(ok), dtype=np.int64)
    n = m = 0
    for row in range(len(ok)):
        if ok[row]:
            rows[n] = row
            n += 1
            if scored[row] != version[row]:
                stale[m] = row
                m += 1
    return rows[:n], stale[:m]


@numba.njit(cache=True, nogil=True)
def first_of_unknown_states(rows, state, known):
    """Positions in `rows` of the first row of each node state the shape has no scores for yet; those
    states are marked known (their rows are scored next)."""
    new = np.empty(len(rows), dtype=np.int64)
    n = 0
    for p in range(len(rows)):
        s = state[rows[p]]
        if not known[s]:
            known[s] = True
            new[n] = p
            n += 1
    return new[:n]


@numba.njit(cache=True, nogil=True)
def share_state_scores(rows, new, state, version, by_row, by_state):
    """The rows just scored (`new`: positions in `rows`) give their node state its scores; then every
    row takes its state's, as of the index's version."""
    score, host, card, scored = by_row
    state_score, state_host, state_card = by_state
    for p in new:
        row = rows[p]
        s = state[row]
        state_score[s], state_host[s], state_card[s] = score[row], host[row], card[row]
    for row in rows:
        s = state[row]
        score[row], host[row], card[row] = state_score[s], state_host[s], state_card[s]
        scored[row] = version[row]
