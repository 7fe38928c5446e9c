"""The working state of one pass: scratch copies of the nodes, the ledger, the reservations, the queue
and the growing plan. The steps (``start``, ``reclaim``, ``backfill``, ``reserve``, ``estimate``) read
and change it; it decides nothing itself."""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from collections.abc import Sequence

from ..cluster import NodeState, OfflineNode, RequestSpec
from ..fragmentation import WorkloadMix
from ..pass_plan import SPOT, Consolidation, PassPlan, QueueMode, RunningAllocation
from ..placement import Placer
from ..queue_ledger import Ledger, TeamQuota
from ..queue_order import FairQueue
from ..queue_reservations import Reservation, ReservationBook, copy_node
from ..queue_text import never_fits


class PassWork:
    """Working state of one pass: scratch copies of the nodes and the growing plan."""

    def __init__(
        self,
        nodes: Sequence[NodeState],
        pending: Sequence[RequestSpec],
        running: Sequence[RunningAllocation],
        quotas: Sequence[TeamQuota],
        now: float,
        policy: str,
        mode: QueueMode,
        workload: WorkloadMix | None,
        offline: Sequence[OfflineNode] = (),
        consolidation: Consolidation | None = None,
    ) -> None:
        self.offline = offline
        self.pending, self.running = pending, running
        self.consolidation = consolidation
        self.moves_planned = 0  # new moves planned by this pass (actions/consolidate.py)
        self.rooms_tried = 0  # blocked requests it looked for moves for
        # The caller's nodes, read as given; the pass copies a node the first time it changes it (own),
        # so a pass that starts one request on a large cluster copies one node, not all of them.
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self._row = {n.name: i for i, n in enumerate(self.nodes)}
        self._owned: set[str] = set()
        self.now, self.policy, self.mode, self.workload = now, policy, mode, workload
        self.ledger = Ledger(self.nodes, quotas)
        self.book = ReservationBook(now, policy)
        self.victims: dict[str, list[RunningAllocation]] = defaultdict(list)
        for allocation in running:
            node = allocation.placement.node
            if node in self.by_name:
                self.ledger.add(allocation.request, node)
                self.book.hold(allocation.request, allocation.placement, allocation.started_at)
                if allocation.preemptible:
                    self.victims[node].append(allocation)
        self.queue = FairQueue(pending, self.ledger, now, mode.fair_share, mode.aging_s)
        self.plan = PassPlan()
        self._version = 0  # bumped whenever free capacity changes
        self._placers: dict[frozenset[str], Placer] = {}
        self._pool_nodes = Counter(n.pool for n in self.nodes)
        self.spot_pools = frozenset(n.pool for n in self.nodes if n.capacity_type == SPOT)
        self._fit_memo: dict[tuple, tuple[int, bool]] = {}
        self._never_memo: dict[tuple, str] = {}
        # The requests left waiting, in queue order, with their reservations (``estimate.finish`` dates them).
        self.waiting: list[tuple[RequestSpec, Reservation | None]] = []

    def placer(self, pools: frozenset[str]) -> Placer:
        """The placement engine over the nodes of these pools (in node order), kept for the pass: its
        index and score caches follow each start and eviction instead of being built per request."""
        placer = self._placers.get(pools)
        if placer is None:
            nodes = [n for n in self.nodes if n.pool in pools]
            placer = self._placers[pools] = Placer(nodes, self.policy, self.workload)
        return placer

    def allowed(self, request: RequestSpec) -> frozenset[str]:
        """The pools of the nodes the request may run on."""
        return frozenset(p for p in self._pool_nodes if not request.pools or p in request.pools)

    def count(self, pools: frozenset[str]) -> int:
        return sum(self._pool_nodes[p] for p in pools)

    def own(self, node: str) -> NodeState:
        """This pass's scratch copy of the node, made the first time the pass changes it (the caller's
        NodeState is never changed); the placers hold the copy from then on."""
        if node not in self._owned:
            mine = copy_node(self.by_name[node])
            self.nodes[self._row[node]] = self.by_name[node] = mine
            for placer in self._placers.values():
                placer.refresh(node, mine)
            self._owned.add(node)
        return self.by_name[node]

    def changed(self, node: str) -> None:
        """A node's free capacity changed: the placers read it again."""
        self._version += 1
        for placer in self._placers.values():
            placer.refresh(node)

    def fork(self, now: float, workload: WorkloadMix | None, reservations: int) -> PassWork:
        """This pass as it stands, judged at `now` with only its first `reservations` reservations, to ask
        where one more request would go: it shares the nodes, the ledger and the holds, so it may reserve
        (start.choose_start, reserve.reserve_for, reserve.cause) but must never start or evict."""
        fork = copy.copy(self)
        fork.now, fork.workload = now, workload
        fork.book = self.book.fork(now, reservations)
        fork._placers = {}  # its own: they score for its workload
        fork.plan, fork.waiting = PassPlan(), []
        return fork

    def fits_now(self, request: RequestSpec) -> bool:
        """Whether the request fits somewhere now, reservations aside (memoised per shape)."""
        key = _shape(request)
        memo = self._fit_memo.get(key)
        if memo is None or memo[0] != self._version:
            memo = (self._version, self.placer(self.allowed(request)).fits(request))
            self._fit_memo[key] = memo
        return memo[1]

    def never_fits(self, request: RequestSpec) -> str:
        """Why the request cannot fit even on an idle node ('' when it can); memoised per shape."""
        key = _shape(request)
        if key not in self._never_memo:
            self._never_memo[key] = never_fits(request, self.nodes, self.offline)
        return self._never_memo[key]


def _shape(request: RequestSpec) -> tuple:
    """What decides whether a request fits, so equal shapes share one answer."""
    return (
        request.gpu_milli,
        request.num_gpus,
        request.cpu_milli,
        request.memory_mib,
        request.gpu_memory_mib,
        request.models,
        request.pools,
    )
