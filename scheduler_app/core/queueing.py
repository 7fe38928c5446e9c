"""One pure scheduling pass: who starts now, who is preempted, who waits, why, and until when.

`plan_pass` takes plain state and returns a `PassPlan`; it changes none of its
inputs, reads no clock (`now` is a parameter) and draws no random numbers, so the
database scheduler, the demo cluster and the benchmarks run the same decisions.
Units: milli-GPU (1000 = one card), MiB, seconds on the caller's epoch.
The plan's types are in ``pass_plan.py``; the pass's steps in ``actions/``.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import placement as placement_policies
from .actions import backfill, consolidate, estimate, reserve, start
from .actions.work import PassWork
from .cluster import NodeState, OfflineNode, RequestSpec
from .fragmentation import WorkloadMix
from .pass_plan import (
    EASY_BACKFILL,
    STRICT_FIFO,
    Consolidation,
    OpenRoom,
    PassPlan,
    Preemption,
    QueueMode,
    Room,
    RunningAllocation,
    Start,
    Waiting,
)
from .queue_ledger import TeamQuota
from .queue_reservations import Reservation

DEFAULT_POLICY: str = getattr(placement_policies, "DEFAULT_POLICY", "first-fit")
_PORTAL_MODE = QueueMode()  # the portal's scheduler: plan_pass's default rules

__all__ = [
    "EASY_BACKFILL",
    "STRICT_FIFO",
    "Consolidation",
    "OpenRoom",
    "PassPlan",
    "Preemption",
    "QueueMode",
    "Reservation",
    "Room",
    "RunningAllocation",
    "Start",
    "TeamQuota",
    "Waiting",
    "plan_pass",
]


def plan_pass(
    nodes: Sequence[NodeState],
    pending: Sequence[RequestSpec],
    running: Sequence[RunningAllocation],
    quotas: Sequence[TeamQuota],
    now: float,
    policy: str = DEFAULT_POLICY,
    mode: QueueMode = _PORTAL_MODE,
    workload: WorkloadMix | None = None,
    offline: Sequence[OfflineNode] = (),
    consolidation: Consolidation | None = None,
) -> PassPlan:
    """Decide one scheduling pass.

    nodes: free state with every running allocation already taken out (as loaded).
    running: those allocations (on nodes not listed they are ignored).
    Requests are considered in FairQueue order; each either starts (quota pools
    first, then borrowing), starts after reclaiming borrowed/spot work (only when
    within quota), or waits, the first `reservation_depth` of them with a reservation
    that later starts must not delay.
    workload: the typical request shapes the fgd policies keep room for
    (``WorkloadMix.from_requests(recent requests)``).
    offline: the nodes that take no new work; a request only they could hold waits saying so.
    consolidation: what may move to make room for a request the scattered free share cannot hold
    (None: nothing moves); the plans held are in the returned plan's `rooms`.
    """
    work = PassWork(nodes, pending, running, quotas, now, policy, mode, workload, offline, consolidation)
    started = consolidate.start_made_rooms(work)
    first_blocked: RequestSpec | None = None
    while (request := work.queue.pop()) is not None:
        if request.id in started:
            continue
        if backfill.may_start(work, first_blocked) and start.try_start(work, request):
            work.queue.touch(request.team)
            continue
        if not consolidate.wait_for_room(work, request):
            reserve.wait(work, request, first_blocked)
        first_blocked = first_blocked or request
    return estimate.finish(work)
