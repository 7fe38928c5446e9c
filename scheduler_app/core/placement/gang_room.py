"""fgd-plus's room for gangs: which nodes could still host each typical gang shape, and what a
placement would cost the scarce ones."""

from __future__ import annotations

from collections.abc import Hashable

import numba
import numpy as np

from ..cluster import MILLI_PER_GPU, RequestSpec
from .index import ClusterIndex


class GangRoom:
    """Which nodes could still host each gang shape (whole cards, CPU, memory), kept per node version."""

    def __init__(self, index: ClusterIndex, gangs: tuple, share: float) -> None:
        self.index = index
        self.cpu = np.array([s.cpu_milli for s, _ in gangs], dtype=np.int64)
        self.mem = np.array([m for _, m in gangs], dtype=np.int64)
        self.num = np.array([s.num_gpus for s, _ in gangs], dtype=np.int64)
        self.eligible = np.array(
            [[not s.models or m in s.models for m in index.models] + [False] for s, _ in gangs], dtype=bool
        ).reshape(len(gangs), len(index.models) + 1)
        # Gang shapes pinned to GPU models: no other model's nodes can stand in for their hosts.
        self.pinned = np.array([bool(s.models) for s, _ in gangs], dtype=bool)
        self.can = np.zeros((len(gangs), len(index.nodes)), dtype=bool)
        self.hosts = np.zeros(len(gangs), dtype=np.int64)
        self.scarce_limit = max(1, share * len(index.nodes))
        self.version = np.full(len(index.nodes), -1, dtype=np.int64)
        # The gang shapes with at most scarce_limit hosts, and 1 / their hosts.
        self.scarce = np.zeros(0, dtype=np.int64)
        self.scarce_weight = np.zeros(0)
        # Per request shape: the gang shapes each node would stop hosting (see _KnownLoss).
        self._lost: dict[tuple, _KnownLoss] = {}

    def cost(
        self,
        request: RequestSpec,
        rows: np.ndarray,
        cards: np.ndarray,
        card: np.ndarray,
        shape: Hashable,
        pinned_only: bool = False,
    ) -> np.ndarray:
        """Per candidate row: the scarce gang shapes (only those pinned to models if `pinned_only`) it
        would stop hosting, each weighted 1 / its hosts. The request takes, at node j, card[j] if it
        asks for one card, the first usable of cards[j] if for more; `shape`: a key under which those
        cards depend only on the node's state (the policy's request shape)."""
        self._refresh()
        ix = self.index
        scarce, weight = self.scarce, self.scarce_weight
        if pinned_only:
            keep = self.pinned[scarce]
            scarce, weight = scarce[keep], weight[keep]
        known = self._lost.get(shape)
        if known is None:
            known = self._lost[shape] = _KnownLoss(len(self.num), len(ix.nodes))
        return gang_cost(
            rows,
            scarce,
            weight,
            (request.cpu_milli, request.memory_mib, request.num_gpus),
            cards,
            card,
            (ix.cpu_free, ix.mem_free, ix.gpu_free, ix.gpu_model, ix.version),
            (self.cpu, self.mem, self.num, self.eligible),
            self.can,
            known.lost,
            known.version,
        )

    def _refresh(self) -> None:
        """Bring `can`, the host counts and the scarce shapes up to the nodes' versions."""
        ix = self.index
        moved = refresh_hosts(
            self.version,
            ix.version,
            ix.cpu_free,
            ix.mem_free,
            ix.gpu_free,
            ix.gpu_model,
            (self.cpu, self.mem, self.num, self.eligible),
            self.can,
            self.hosts,
        )
        if not moved:  # most placements leave every gang shape's hosts as they were
            return
        self.scarce = (self.hosts <= self.scarce_limit).nonzero()[0]
        self.scarce_weight = 1 / np.maximum(self.hosts[self.scarce], 1)


@numba.njit(cache=True, nogil=True)
def refresh_hosts(version, index_version, cpu_free, mem_free, gpu_free, gpu_model, gangs, can, hosts):
    """For each node whose version moved: whether it can host each gang shape now (`can[g, j]`, with
    `hosts[g]` kept as can[g].sum()); `gangs`: the shapes' CPU, memory, cards and eligible models.
    Returns whether some node's `can` changed."""
    none_taken = np.zeros(gpu_free.shape[1], dtype=np.bool_)
    moved = False
    for j in range(len(version)):
        if version[j] == index_version[j]:
            continue
        version[j] = index_version[j]
        for g in range(len(can)):
            now = _can_host(g, gangs, cpu_free[j], mem_free[j], gpu_free[j], gpu_model[j], none_taken)
            if now != can[g, j]:
                hosts[g] += 1 if now else -1
                can[g, j] = now
                moved = True
    return moved


class _KnownLoss:
    """For one request shape: lost[g, j], node j would stop hosting gang shape g if the request took
    its cards there; valid while node j is at `version[j]`. (What a node loses depends on its state,
    the request's CPU and memory and the cards, which its state fixes; not on which shapes are
    scarce now.)"""

    def __init__(self, gangs: int, n: int) -> None:
        self.version = np.full(n, -1, dtype=np.int64)
        self.lost = np.zeros((gangs, n), dtype=bool)


@numba.njit(cache=True, nogil=True)
def _can_host(g, gangs, cpu_free, mem_free, gpu_free, gpu_model, taken):
    """Whether a node with this free CPU, memory and cards (less the cards `taken`) can host gang
    shape g: enough whole cards of a model it may use, enough CPU and memory."""
    cpu, mem, num, eligible = gangs
    whole = 0
    for c in range(len(gpu_free)):
        if gpu_free[c] == MILLI_PER_GPU and not taken[c] and eligible[g, gpu_model[c]]:
            whole += 1
    return whole >= num[g] and cpu_free >= cpu[g] and mem_free >= mem[g]


@numba.njit(cache=True, nogil=True)
def gang_cost(rows, scarce, weight, request, cards, card, index, gangs, can, lost, lost_version):
    """``GangRoom.cost`` compiled: `request` is its CPU milli, memory MiB and cards; `index`, the
    index's free CPU, memory, milli, models and versions; `gangs`, the gang shapes' CPU, memory,
    cards and eligible models. `lost`, `lost_version`: the request shape's _KnownLoss, brought up to
    date for the rows it reads."""
    cpu, memory, num = request
    cpu_free, mem_free, gpu_free, gpu_model, version = index
    slots = gpu_free.shape[1]
    cost = np.zeros(len(rows))
    terms = np.empty(len(scarce))
    taken = np.zeros(slots, dtype=np.bool_)
    for i in range(len(rows)):
        j = rows[i]
        if lost_version[j] != version[j]:
            hit = False
            for s in range(len(scarce)):
                hit = hit or can[scarce[s], j]
            if not hit:  # it hosts no scarce shape now: it loses none (lost[g, j] implies can[g, j])
                continue
            taken[:] = False
            if num == 1:
                taken[card[j]] = True
            elif num > 1:
                left = num
                for c in range(slots):
                    if left and cards[j, c]:
                        taken[c] = True
                        left -= 1
            for g in range(len(can)):
                after = _can_host(
                    g, gangs, cpu_free[j] - cpu, mem_free[j] - memory, gpu_free[j], gpu_model[j], taken
                )
                lost[g, j] = can[g, j] and not after
            lost_version[j] = version[j]
        loses = False
        for s in range(len(scarce)):
            terms[s] = weight[s] if lost[scarce[s], j] else 0.0
            loses = loses or lost[scarce[s], j]
        if loses:
            cost[i] = _pairwise_sum(terms)
    return cost


@numba.njit(cache=True, nogil=True)
def _pairwise_sum(values):
    """The sum of `values` in numpy's order: the costs are compared for ties, and the recorded
    decisions (test_decisions_pinned.py) were made with numpy's sums. numpy halves a sum of more than
    128 (at a multiple of 8) and adds the halves; this walks that tree with a stack (numba's cache
    breaks recursive functions)."""
    if len(values) <= 128:
        return _block_sum(values)
    # Pending work: a block (start, n) to sum, or start -1: add the two sums on top of `sums`.
    starts, sizes, sums = np.empty(128, np.int64), np.empty(128, np.int64), np.empty(128)
    starts[0], sizes[0] = 0, len(values)
    pending, done = 1, 0
    while pending:
        pending -= 1
        start, n = starts[pending], sizes[pending]
        if start < 0:
            done -= 1
            sums[done - 1] += sums[done]
        elif n > 128:
            half = n // 2 - (n // 2) % 8
            starts[pending], starts[pending + 1], starts[pending + 2] = -1, start + half, start
            sizes[pending + 1], sizes[pending + 2] = n - half, half
            pending += 3
        else:
            sums[done] = _block_sum(values[start : start + n])
            done += 1
    return sums[0]


@numba.njit(cache=True, nogil=True)
def _block_sum(values):
    """numpy's sum of at most 128 values: in order below 8, else in eight accumulators."""
    n = len(values)
    if n < 8:
        total = -0.0
        for i in range(n):
            total += values[i]
        return total
    r = values[:8].copy()
    i = 8
    while i < n - n % 8:
        for k in range(8):
            r[k] += values[i + k]
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for k in range(i, n):
        total += values[k]
    return total
