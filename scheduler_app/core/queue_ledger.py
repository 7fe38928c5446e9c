"""Who uses how much: per-team usage for quotas (milli-GPU per pool) and fair share.

Fair share is the dominant share of Dominant Resource Fairness: the largest of a
team's fractions of the cluster's GPU milli, CPU milli and host memory. The
fractions only order teams; capacity arithmetic stays in integers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .cluster import NodeState, RequestSpec


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """A team's guaranteed share of one pool, in milli-GPU (1000 = one card)."""

    team: str
    pool: str
    guaranteed_milli: int


class Ledger:
    """Usage per team, updated as a pass starts and preempts work."""

    def __init__(self, nodes: Sequence[NodeState], quotas: Iterable[TeamQuota]) -> None:
        self.pool_of = {node.name: node.pool for node in nodes}
        self.pools = sorted(set(self.pool_of.values()))
        self._capacity = (
            max(1, sum(len(n.gpus) for n in nodes) * 1000),
            max(1, sum(n.cpu_milli for n in nodes)),
            max(1, sum(n.memory_mib for n in nodes)),
        )
        self._guaranteed = {(q.team, q.pool): q.guaranteed_milli for q in quotas}
        self._pool_milli: dict[tuple[str, str], int] = defaultdict(int)
        self._use: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])

    def add(self, request: RequestSpec, node: str, sign: int = 1) -> None:
        """Count (sign=1) or uncount (sign=-1) a request placed on `node`."""
        use = self._use[request.team]
        use[0] += sign * request.total_milli()
        use[1] += sign * request.cpu_milli
        use[2] += sign * request.memory_mib
        self._pool_milli[request.team, self.pool_of[node]] += sign * request.total_milli()

    def dominant_share(self, team: str) -> float:
        """Dominant share of the cluster, 0.0 .. 1.0 (more when over-counted)."""
        use = self._use[team]
        return max(u / c for u, c in zip(use, self._capacity, strict=True))

    def headroom(self, team: str, pool: str) -> int:
        """Guaranteed milli the team does not use yet in that pool (may be negative)."""
        return self._guaranteed.get((team, pool), 0) - self._pool_milli[team, pool]

    def quota_pools(self, request: RequestSpec) -> list[str]:
        """Pools where the whole request still fits in its team's guaranteed quota."""
        allowed = request.pools or self.pools
        need = request.total_milli()
        return [p for p in self.pools if p in allowed and self.headroom(request.team, p) >= need]

    def is_borrowed(self, request: RequestSpec, node: str) -> bool:
        """Whether placing the request on `node` goes beyond its team's quota there."""
        return self.headroom(request.team, self.pool_of[node]) < request.total_milli()
