"""What a placement policy is, and the array helpers the policies share."""

from __future__ import annotations

import numba
import numpy as np

from ..cluster import RequestSpec
from ..fragmentation import WorkloadMix
from .index import ClusterIndex


def first_cards(cards: np.ndarray, num: int) -> np.ndarray:
    """Per row, the lowest-index `num` usable cards (boolean mask)."""
    return cards & (np.cumsum(cards, axis=1) <= num)


def lexmin(mask: np.ndarray, *keys: np.ndarray) -> int | None:
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


@numba.njit(cache=True, nogil=True)
def least(rows, values):
    """Those of `rows` (not empty) whose value, `values[row]`, is the least, in their order."""
    low = values[rows[0]]
    for row in rows:
        low = min(low, values[row])
    kept = np.empty(len(rows), dtype=np.int64)
    n = 0
    for row in rows:
        if values[row] == low:
            kept[n] = row
            n += 1
    return kept[:n]


class Policy:
    """Chooses (node row, card indices) for a request on a ClusterIndex, or None."""

    def __init__(self, index: ClusterIndex, workload: WorkloadMix | None = None) -> None:
        self.index = index

    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        raise NotImplementedError
