"""Adaptive adjustment: offer a running job a share its measured utilization says suits it better, and
record the user's opt-in for the scheduler to apply at the job's next checkpoint.

The owner of every ResizeOffer state change: `offer_resizes` (offered / withdrawn; after each telemetry
upkeep: Celery beat's resize-offers, the embedded worker), `accept_resize` (the user opts in),
`mark_resize_applied` (the scheduler, once resized)."""

import datetime as dt

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from audit.choices import NoticeKind
from audit.events import log_event
from audit.notices import Finding, raise_notices
from billing_app.choices import OPEN_RESIZE_STATES, ResizeState
from billing_app.models import ResizeOffer
from billing_app.performance import suggest_resize
from billing_app.permissions import can_accept_resize
from billing_app.recommendation import measured_utilization
from infra.conflicts import StateConflict
from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.permissions import can_act_on
from teams.permissions import require

IDLE_BUSY = 0.05  # below this the idle check speaks (release it), not a resize offer
WARM_UP_S = 600  # a job's first 10 minutes (loading data and model) say nothing about its steady load
OFFERS = "resize offers"


def offer_resizes(now: dt.datetime | None = None) -> list[ResizeOffer]:
    """Offer each running single-card request past its warm-up the share its last hour of utilization
    suits (once per episode, with a notice to its team); withdraw offers not taken up whose condition
    ended. Returns the offers made now. Idempotent: a rerun on the same readings offers nothing new.
    Reads the minute rollups: run it after the telemetry upkeep."""
    now = now or timezone.now()
    running = GpuRequest.objects.filter(
        state=RequestState.RUNNING, num_gpus=1, started_at__lte=now - dt.timedelta(seconds=WARM_UP_S)
    ).only("id", "team_id", "name", "gpu_milli", "num_gpus", "task_type", "started_at", "ended_at")
    open_offers = {o.request_id: o for o in ResizeOffer.objects.filter(state__in=OPEN_RESIZE_STATES)}
    made, findings = [], []
    for request in running:
        measured = measured_utilization(request, now)
        if measured is None or measured.busy < IDLE_BUSY:
            continue
        resize = suggest_resize(request.gpu_milli, measured.busy, request.task_type)
        if not resize or (resize.to_milli > resize.from_milli and _shares_its_card(request)):
            continue  # a neighbour's load would look like this job's: no "starved" offer on a shared card
        offer = open_offers.get(request.pk)
        if offer is None:
            offer = _offer(request, resize, round(100 * measured.busy), now)
            if offer is None:
                continue  # another upkeep offered it first
            made.append(offer)
        findings.append(
            Finding(
                kind=NoticeKind.RESIZE_OFFER,
                team_id=request.team_id,
                key=f"resize:request:{request.pk}",
                subject=request,
                text=f"{request.name}: {offer.reason} Accept it to have it applied at the next checkpoint.",
                data={"request_id": request.pk, "offer_id": offer.pk, "to_milli": offer.to_milli},
            )
        )
    offered = {f.data["request_id"] for f in findings}
    ResizeOffer.objects.filter(state=ResizeState.OFFERED).exclude(request_id__in=offered).update(
        state=ResizeState.WITHDRAWN, closed_at=now
    )
    raise_notices(findings, kinds=[NoticeKind.RESIZE_OFFER], now=now)
    return made


def _shares_its_card(request: GpuRequest) -> bool:
    cards = Allocation.objects.committed().filter(request=request).values("gpu_id")
    return Allocation.objects.committed().filter(gpu_id__in=cards).exclude(request=request).exists()


def _offer(request: GpuRequest, resize, busy_percent: int, now: dt.datetime) -> ResizeOffer | None:
    try:
        with transaction.atomic():
            return ResizeOffer.objects.create(
                request=request,
                from_milli=resize.from_milli,
                to_milli=resize.to_milli,
                busy_percent=busy_percent,
                slowdown_percent=resize.slowdown_percent,
                saving_percent=resize.saving_percent,
                reason=resize.reason[:500],
                offered_at=now,
            )
    except IntegrityError:
        return None


def accept_resize(offer: ResizeOffer, *, user, now: dt.datetime | None = None) -> ResizeOffer:
    """A member of the request's team opts in: the offer becomes the scheduler's to apply at the
    request's next checkpoint (an Event on the request records who and when)."""
    with transaction.atomic():
        offer = ResizeOffer.objects.select_for_update().select_related("request").get(pk=offer.pk)
        require(can_act_on(user, offer.request), "Only members of the request's team can accept its resize.")
        if not can_accept_resize(user, offer):
            state = offer.get_state_display().lower()
            raise StateConflict(
                f"This resize is {state}, not offered."
                if state != "offered"
                else "The request is no longer running."
            )
        offer.state, offer.accepted_at, offer.accepted_by = ResizeState.ACCEPTED, now or timezone.now(), user
        offer.save(update_fields=["state", "accepted_at", "accepted_by"])
        log_event(
            offer.request,
            "resize_accepted",
            actor=user,
            reason=f"Resize from {offer.from_milli} to {offer.to_milli} milli-GPU at the next checkpoint.",
            data={"offer_id": offer.pk, "from_milli": offer.from_milli, "to_milli": offer.to_milli},
        )
    return offer


def visible_resize_offers(user) -> QuerySet[ResizeOffer]:
    """The offers on the user's teams' requests, newest first."""
    return ResizeOffer.objects.filter(request__team__memberships__user=user)


def open_resize_offer(request: GpuRequest) -> ResizeOffer | None:
    """The request's offer still offered or accepted (at most one), for its page."""
    return request.resize_offers.filter(state__in=OPEN_RESIZE_STATES).first()


def resizes_to_apply() -> QuerySet[ResizeOffer]:
    """The accepted offers the scheduler has still to apply, oldest first, with their requests."""
    return (
        ResizeOffer.objects.filter(state=ResizeState.ACCEPTED)
        .select_related("request")
        .order_by("accepted_at")
    )


def mark_resize_applied(offer: ResizeOffer, *, now: dt.datetime | None = None) -> ResizeOffer:
    """The scheduler resized the request (at its checkpoint, through the lifecycle owner): close the offer."""
    with transaction.atomic():
        offer = ResizeOffer.objects.select_for_update().get(pk=offer.pk)
        if offer.state != ResizeState.ACCEPTED:
            raise StateConflict(f"This resize is {offer.get_state_display().lower()}, not accepted.")
        offer.state, offer.closed_at = ResizeState.APPLIED, now or timezone.now()
        offer.save(update_fields=["state", "closed_at"])
    return offer
