"""Step *start*: start a request where it fits now (its quota pools first), else where reclaiming
borrowed or spot work makes room for it (``reclaim``)."""

from __future__ import annotations

from ..cluster import Placement, RequestSpec
from ..pass_plan import SPOT, RunningAllocation, Start
from ..placement import apply_placement
from . import backfill, reclaim
from .work import PassWork


def try_start(work: PassWork, request: RequestSpec) -> bool:
    """Start the request if it fits (quota pools first), else reclaim for it if allowed."""
    choice = choose_start(work, request)
    if choice is None:
        return False
    placement, victims = choice
    for victim in victims:
        reclaim.evict(work, victim, request)
    _start(work, request, placement)
    return True


def choose_start(work: PassWork, request: RequestSpec) -> tuple[Placement, list[RunningAllocation]] | None:
    """Where the request would start now, and whose borrowed/spot work it reclaims; changes nothing."""
    if work.fits_now(request):
        views = backfill.guarded_views(work, request)
        for pools in tiers(work, request):
            placement = work.placer(pools).choose(request, views)
            if placement is not None:
                return placement, []
    return reclaim.reclaim_choice(work, request)


def tiers(work: PassWork, request: RequestSpec) -> list[frozenset[str]]:
    """The sets of pools a start tries in turn, each one's quota pools before the rest of it. Spot work
    that accepts on-demand fallback tries the spot pools first: it falls back to on-demand capacity
    only when no spot pool can place it now (spot is what it asked and pays for)."""
    allowed = work.allowed(request)
    groups = [allowed]
    if request.billing_mode == SPOT and request.allow_fallback:
        spot = allowed & work.spot_pools
        if 0 < work.count(spot) < work.count(allowed):
            groups = [spot, allowed]
    quota = work.ledger.quota_pools(request)
    found = []
    for group in groups:
        in_quota = group.intersection(quota)
        if 0 < work.count(in_quota) < work.count(group):
            found.append(in_quota)
        found.append(group)
    return found


def _start(work: PassWork, request: RequestSpec, placement: Placement) -> None:
    borrowed = work.ledger.is_borrowed(request, placement.node)
    apply_placement(work.own(placement.node), request, placement)
    work.ledger.add(request, placement.node)
    work.book.hold(request, placement, work.now)
    work.changed(placement.node)
    work.plan.starts.append(Start(request, placement, borrowed))
