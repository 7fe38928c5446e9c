"""fgd-plus's room for gangs: which nodes could still host each typical gang shape, and what a
placement would cost the scarce ones."""

from __future__ import annotations

from collections.abc import Callable, Hashable

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


def _weighted_sum(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per column k, the sum over i of weights[i] * values[i, k], each column summed alone as one
    contiguous row, so a column's result does not depend on the others. (A BLAS product, or a sum
    down the columns, rounds a column differently by the batch's size and its place in it.)"""
    return (np.ascontiguousarray(values.T) * weights[None, :]).sum(axis=1)
