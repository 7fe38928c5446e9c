"""Step *reserve*: a request that does not start waits; the first `reservation_depth` blocked ones get
a reservation, and every one gets the cause its user reads."""

from __future__ import annotations

from ..cluster import RequestSpec
from ..pass_plan import Waiting
from ..queue_reservations import Reservation
from ..queue_text import no_room
from .work import PassWork


def wait(
    work: PassWork, request: RequestSpec, first_blocked: RequestSpec | None, explain: bool = True
) -> Reservation | None:
    """Leave the request pending, with a reservation while the depth allows (returned); explain=False
    leaves its cause blank, for a plan nobody reads the words of."""
    reservation = reserve_for(work, request)
    work.waiting.append((request, reservation))
    reason = cause(work, request, first_blocked) if explain else ""
    work.plan.waiting.append(Waiting(request.id, reason, len(work.plan.waiting)))
    return reservation


def reserve_for(work: PassWork, request: RequestSpec) -> Reservation | None:
    """Reserve for a blocked request while fewer than `reservation_depth` are held and it can fit."""
    if len(work.book.reservations) < work.mode.reservation_depth and not work.never_fits(request):
        return work.book.reserve(request, work.nodes)
    return None


def cause(work: PassWork, request: RequestSpec, first_blocked: RequestSpec | None) -> str:
    """Why the request waits, in the words its user reads."""
    if impossible := work.never_fits(request):
        return impossible
    if not work.fits_now(request):
        return no_room(request)
    if first_blocked is not None and not work.mode.backfill:
        return f"waiting behind request {first_blocked.id}, first in line"
    held = ", ".join(str(r.request_id) for r in work.book.reservations) or "earlier requests"
    return f"the free capacity is reserved for earlier requests ({held})"
