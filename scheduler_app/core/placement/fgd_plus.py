"""``fgd-plus`` (the default policy): FGD with room kept for scarce gangs and task-aware cards; see
the package's docstring for its order of tie-breaks."""

from __future__ import annotations

import numba
import numpy as np

from ..cluster import MILLI_PER_GPU, RequestSpec
from ..fragmentation import WorkloadMix
from .fgd import Fgd, ShapeScores
from .gang_room import GangRoom
from .index import ClusterIndex
from .policy import least

# fgd-plus keeps nodes for a gang shape while at most this share of the nodes can still host it...
SCARCE_GANG_SHARE = 0.1
# ...plus this much more per unit of CPU pressure above CALM_CPU_PRESSURE (see ``scarce_gang_share``).
GANG_SHARE_PER_CPU_PRESSURE = 2.0
CALM_CPU_PRESSURE = 0.9
# A CPU-only request compares the cards it would strand in steps of the smallest share sold.
STRANDED_STEP_MILLI = MILLI_PER_GPU // 8


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
    host_aware = True

    def __init__(self, index: ClusterIndex, workload: WorkloadMix | None = None) -> None:
        super().__init__(index, workload)
        mix = workload or WorkloadMix()
        share = scarce_gang_share(index, mix)
        self.gangs = GangRoom(index, mix.gangs, share) if mix.gangs else None
        self.pinned = _pinned_demand(index, mix.pinned)
        # Where CPU runs out before GPU (pressure above 1), a CPU-only request ranks by the cards it
        # would strand (host-aware growth in eighths) instead of by FGD's rank, which sees the CPU it
        # takes only once cards are stranded; until every gang shape is scarce (share 1), where the
        # gang room before the rank decides and FGD's rank did better (bench/README "Strand first").
        self.strand_first = cpu_pressure(index, mix) > 1.0 and share < 1.0

    def _ranks(
        self, request: RequestSpec, plain: np.ndarray, host: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # The host-aware increase stays raw, not rounded like FGD's rank: it only orders FGD's ties...
        if self.strand_first and request.num_gpus == 0:
            # ...except for a CPU-only request under CPU pressure, which ranks by it (see __init__).
            return np.floor(host / STRANDED_STEP_MILLI), host
        return self._rank(plain), host

    def _select(self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores) -> int:
        cpu_only = request.num_gpus == 0
        if len(rows) > 1 and self.gangs is not None and (cpu_only or self.gangs.pinned.any()):
            # Before FGD's rank: a scarce gang pinned to a model loses hosts no other model can replace;
            # and FGD's rank sees a CPU-only request take a gang's CPU only once cards are stranded.
            cost = self.gangs.cost(request, rows, cards, scores.card, scores, pinned_only=not cpu_only)
            rows = rows[cost == cost.min()]
        rows = least(rows, scores.score)
        if len(rows) > 1 and self.gangs is not None and not cpu_only:
            cost = self.gangs.cost(request, rows, cards, scores.card, scores)
            rows = rows[cost == cost.min()]
        if len(rows) > 1 and self.pinned is not None and request.num_gpus and not request.models:
            pressure = self._model_pressure(request, rows, cards, scores)
            rows = rows[pressure == pressure.min()]
        if len(rows) > 1 and cpu_only:
            rows = self._tightest_cpu(rows, scores)
        if len(rows) > 1:
            rows = least(rows, scores.host)
        if len(rows) > 1:
            left = self._left(request, rows)
            rows = rows[left == left.min()]
        return int(rows[0])

    def _tightest_cpu(self, rows: np.ndarray, scores: ShapeScores) -> np.ndarray:
        """For a CPU-only request: of the rows that strand the fewest cards (host-aware growth in
        eighths of a card), those with the least free CPU, so the large blocks of free CPU that
        CPU-hungry GPU requests and gangs need stay whole."""
        stranded = np.floor(scores.host[rows] / STRANDED_STEP_MILLI)
        rows = rows[stranded == stranded.min()]
        cpu = self.index.cpu_free[rows]
        return rows[cpu == cpu.min()]

    def _model_pressure(
        self, request: RequestSpec, rows: np.ndarray, cards: np.ndarray, scores: ShapeScores
    ) -> np.ndarray:
        """Per candidate row: how much constrained demand wants the model of the card(s) it would take,
        per free milli of that model now (an unconstrained request should use the least wanted)."""
        ix = self.index
        cards_of = ix.gpu_model >= 0
        free = np.bincount(ix.gpu_model[cards_of], weights=ix.gpu_free[cards_of], minlength=len(ix.models))
        pressure = np.append(self.pinned / np.maximum(free, 1), np.inf)
        card = scores.card[rows] if request.num_gpus == 1 else np.argmax(cards[rows], axis=1)
        return pressure[ix.gpu_model[rows, card]]

    def _cards(
        self, request: RequestSpec, ok: np.ndarray, cards: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        if request.task_type != "inference" or request.num_gpus == 0:
            return ok, cards, False
        idle, on_idle = np.empty_like(cards), np.empty_like(ok)
        if idle_cards(ok, cards, self.index.gpu_free, request.num_gpus, idle, on_idle):
            return on_idle, idle, True
        return ok, cards, False


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


@numba.njit(cache=True, nogil=True)
def idle_cards(ok, cards, gpu_free, num, idle, on_idle):
    """Write into `idle` the usable `cards` nobody uses (all their milli free), and into `on_idle` the
    `ok` rows with one or more of them; return whether some `ok` row has `num` or more."""
    enough = False
    for j in range(cards.shape[0]):
        count = 0
        for c in range(cards.shape[1]):
            idle[j, c] = cards[j, c] and gpu_free[j, c] == MILLI_PER_GPU
            count += idle[j, c]
        on_idle[j] = ok[j] and count > 0
        enough = enough or (ok[j] and count >= num)
    return enough
