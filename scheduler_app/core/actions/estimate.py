"""Step *estimate*, at the end of a pass: each waiting request's start, from its reservation or else
from the fluid estimate of the capacity freeing up."""

from __future__ import annotations

from ..cluster import RequestSpec
from ..pass_plan import PassPlan, Waiting
from ..queue_estimates import FluidEstimator
from ..queue_reservations import Reservation
from .work import PassWork


def finish(work: PassWork) -> PassPlan:
    """Attach start estimates (reservation times, else the fluid estimate) and return the plan."""
    fluid = estimator(work) if work.waiting else None
    for i, (request, reservation) in enumerate(work.waiting):
        estimate = estimate_start(work, fluid, request, reservation)
        if estimate is not None and estimate[1]:
            w = work.plan.waiting[i]
            work.plan.waiting[i] = Waiting(w.request_id, w.cause, w.ahead, estimate[0])
    work.plan.reservations = list(work.book.reservations)
    return work.plan


def estimator(work: PassWork) -> FluidEstimator:
    """The fluid estimator on the capacity as it stands, before any waiting request is counted."""
    pool_of = work.ledger.pool_of
    releases = [(pool_of[node], h.end, h.milli * len(h.gpus), h.known) for node, h in work.book.releases()]
    return FluidEstimator(work.nodes, releases, work.now)


def estimate_start(
    work: PassWork, fluid: FluidEstimator, request: RequestSpec, reservation: Reservation | None
) -> tuple[float, bool] | None:
    """(start s, firm) of the next waiting request in queue order; `fluid` then counts it started."""
    if reservation is not None:
        fluid.take_reservation(work.ledger.pool_of[reservation.node], request, reservation.start_at)
        return reservation.start_at, reservation.firm
    return fluid.take_earliest(request)
