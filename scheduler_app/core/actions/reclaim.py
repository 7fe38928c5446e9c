"""Step *reclaim*: within-quota work that fits nowhere takes back borrowed or spot capacity from other
teams, the fewest allocations that make room, unless room frees up by itself within the grace."""

from __future__ import annotations

from ..cluster import NodeState, Placement, RequestSpec
from ..pass_plan import Preemption, RunningAllocation
from ..placement import choose_placement, release_placement
from ..queue_reservations import copy_node, fits
from .work import PassWork


def reclaim_choice(work: PassWork, request: RequestSpec) -> tuple[Placement, list[RunningAllocation]] | None:
    """The fewest borrowed/spot allocations of other teams to preempt so within-quota work starts."""
    quota_pools = work.ledger.quota_pools(request)
    if not work.mode.preemption or not quota_pools:
        return None
    end = work.book.end_of(request)
    candidates = [n for n in work.nodes if n.pool in quota_pools and work.victims[n.name]]
    best: tuple[list[RunningAllocation], Placement] | None = None
    for node in work.book.view(candidates, end):
        found = _victims_on(work, node, request, len(best[0]) if best else None)
        if found:
            best = found
    if best is None or _frees_in_time(work, request):
        return None
    victims, placement = best
    return placement, victims


def _frees_in_time(work: PassWork, request: RequestSpec) -> bool:
    """Whether room for the request frees up by itself (max durations, reservations held) within the
    reclaim grace of its submission: then it waits for that instead of preempting anyone."""
    grace = work.mode.reclaim_grace_s
    if grace is None or request.submitted_at + grace < work.now:
        return False
    earliest = work.book.earliest(request, work.nodes)
    return earliest is not None and earliest[1] and earliest[0] <= request.submitted_at + grace


def _victims_on(
    work: PassWork, node: NodeState, request: RequestSpec, fewer_than: int | None
) -> tuple[list[RunningAllocation], Placement] | None:
    """Borrowed before spot, lowest priority, youngest first, until the request fits."""
    order = sorted(
        (a for a in work.victims[node.name] if a.request.team != request.team),
        key=lambda a: (not a.borrowed, a.request.priority, -a.started_at, str(a.request.id)),
    )
    scratch = copy_node(node)
    for count, victim in enumerate(order, start=1):
        if fewer_than is not None and count >= fewer_than:
            return None
        release_placement(scratch, victim.request, victim.placement)
        if fits(request, scratch):
            placement = choose_placement([scratch], request, work.policy, work.workload)
            if placement is not None:
                return order[:count], placement
    return None


def evict(work: PassWork, victim: RunningAllocation, request: RequestSpec) -> None:
    """Checkpoint and requeue the victim to make room for `request`, and record the preemption."""
    node = victim.placement.node
    release_placement(work.own(node), victim.request, victim.placement)
    work.ledger.add(victim.request, node, sign=-1)
    work.book.drop(victim.request.id, node)
    work.victims[node].remove(victim)
    work.changed(node)
    kind = "borrowed capacity" if victim.borrowed else "spot capacity"
    reason = f"{kind} reclaimed for request {request.id} of team {request.team or '-'} within its quota"
    work.plan.preemptions.append(Preemption(victim, request.id, reason))
    work.queue.touch(victim.request.team)
