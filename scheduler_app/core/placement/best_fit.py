"""``best-fit``: the node left with the least free CPU + GPU (each normalised by the largest node),
tightest cards; the simulator's BestFit."""

from __future__ import annotations

import numpy as np

from ..cluster import RequestSpec
from .policy import Policy, lexmin


class BestFit(Policy):
    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        ix = self.index
        ok, cards = ix.feasible(request)
        left = (ix.cpu_free - request.cpu_milli) / ix.cpu_scale + (
            ix.gpu_idle - request.total_milli()
        ) / ix.gpu_scale
        j = lexmin(ok, left)
        if j is None:
            return None
        usable = np.flatnonzero(cards[j])
        tightest = usable[np.argsort(ix.gpu_free[j, usable], kind="stable")]
        return j, tuple(int(c) for c in tightest[: request.num_gpus])
