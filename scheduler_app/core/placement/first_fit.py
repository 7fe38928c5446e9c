"""``first-fit``: the first node in the given order with room, lowest card indices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cluster import NodeState, Placement, RequestSpec
from .fits import candidate_gpus, node_admits
from .policy import Policy, lexmin


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


class FirstFit(Policy):
    def choose(self, request: RequestSpec) -> tuple[int, tuple[int, ...]] | None:
        ok, cards = self.index.feasible(request)
        j = lexmin(ok)
        if j is None:
            return None
        return j, tuple(int(c) for c in np.flatnonzero(cards[j])[: request.num_gpus])
