"""Recording work that already ran: requests that ended before they were written here (the demo's week of
history), each with its closed slices and the events its lifecycle owner would have written, in bulk.

Nothing here changes live work: every request written is terminal and holds no open slice. Under the
cards' locks, the new slices and the ones already recorded must fit every card at every moment
(DESIGN rule 1 over time); otherwise nothing is written.
"""

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from audit.events import build_event
from audit.models import Event
from infra.bulk_insert import insert_rows
from scheduler_app.choices import RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.rules.invariants import first_peak_over
from scheduler_app.rules.lifecycle import TERMINAL_STATES
from scheduler_app.services.agents import exit_reason
from scheduler_app.services.inventory import AGENT
from scheduler_app.services.segments import add_segments


@dataclass(frozen=True)
class PastSlice:
    """A card the request held while it ran: milli-GPU 1..1000 and GPU memory (MiB)."""

    gpu_id: int
    milli: int
    gpu_memory_mib: int
    borrowed: bool = False


@dataclass(frozen=True)
class PastRequest:
    """A request that ran once, from started_at to ended_at, and ended `outcome` with exit_code.

    `request` is unsaved, with its owner, shape and billing set, and its submit time as created_at."""

    request: GpuRequest
    started_at: dt.datetime
    ended_at: dt.datetime
    outcome: str
    exit_code: int
    slices: tuple[PastSlice, ...]


def record_past_requests(past: Sequence[PastRequest]) -> list[GpuRequest]:
    """Write the requests, their slices and their events (submitted, placed, started, ended, each at its
    own time) in one transaction; returns the saved requests. ValidationError, and nothing written, when
    a request is not terminal, ends before it starts, or its slices do not fit their cards at some
    moment beside everything already recorded there."""
    for item in past:
        _check(item)
    if not past:
        return []
    with transaction.atomic():
        gpu_ids = sorted({piece.gpu_id for item in past for piece in item.slices})
        cards = {
            gpu.pk: gpu
            for gpu in Gpu.objects.select_for_update(no_key=True)
            .select_related("node")
            .filter(pk__in=gpu_ids)
            .order_by("pk")
        }
        _check_capacity(past, cards)
        requests = [_stamped(item) for item in past]
        insert_rows(GpuRequest, requests)
        add_segments(
            [
                Allocation(
                    request_id=request.pk,
                    gpu_id=piece.gpu_id,
                    milli=piece.milli,
                    gpu_memory_mib=piece.gpu_memory_mib,
                    billing_mode=request.billing_mode,
                    borrowed=piece.borrowed,
                    started_at=item.started_at,
                    ended_at=item.ended_at,
                )
                for item, request in zip(past, requests, strict=True)
                for piece in item.slices
            ],
        )
        # The history is not news: its events go to the log without a live message each.
        insert_rows(
            Event,
            [
                event
                for item, request in zip(past, requests, strict=True)
                for event in _events(item, request, cards)
            ],
        )
    return requests


def _check(item: PastRequest) -> None:
    request = item.request
    if item.outcome not in TERMINAL_STATES:
        raise ValidationError({"state": f"{request.name}: a recorded request has ended, not {item.outcome}."})
    if not request.created_at <= item.started_at <= item.ended_at:
        raise ValidationError({"started_at": f"{request.name}: submitted, started and ended out of order."})
    if len({piece.gpu_id for piece in item.slices}) != request.num_gpus:
        raise ValidationError({"slices": f"{request.name} needs {request.num_gpus} distinct card(s)."})
    # Field and row rules without the constraint queries full_clean would run per request.
    request.clean_fields(exclude=["team", "user", "pool"])
    request.clean()


def _check_capacity(past: Sequence[PastRequest], cards: dict[int, Gpu]) -> None:
    """Every card holds at most 1000 milli-GPU and its memory at every moment, counting the slices
    already recorded over the same time."""
    lo = min(item.started_at for item in past)
    hi = max(item.ended_at for item in past)
    held: dict[int, list[tuple]] = {gpu_id: [] for gpu_id in cards}
    for gpu_id, milli, memory, started, ended in (
        Allocation.objects.filter(gpu_id__in=list(cards), started_at__lt=hi)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=lo))
        .values_list("gpu_id", "milli", "gpu_memory_mib", "started_at", "ended_at")
    ):
        held[gpu_id].append((started, ended, milli, memory))
    for item in past:
        for piece in item.slices:
            if piece.gpu_id not in cards:
                raise ValidationError({"slices": f"No GPU with id {piece.gpu_id}."})
            held[piece.gpu_id].append((item.started_at, item.ended_at, piece.milli, piece.gpu_memory_mib))
    for gpu_id, slices in held.items():
        card = cards[gpu_id]
        if peak := first_peak_over(slices, MILLI_PER_GPU, card.memory_mib):
            at, milli, memory = peak
            said = f"{card} would hold {milli} milli-GPU and {memory} of {card.memory_mib} MiB at {at}."
            raise ValidationError({"slices": said})


def _stamped(item: PastRequest) -> GpuRequest:
    request = item.request
    request.state = item.outcome
    request.scheduled_at = request.started_at = item.started_at
    request.ended_at = item.ended_at
    request.exit_code = item.exit_code
    request.placements = 1
    return request


def _events(item: PastRequest, request: GpuRequest, cards: dict[int, Gpu]) -> list[Event]:
    """What the lifecycle owner would have logged: submitted, placed, started, ended."""
    where = ", ".join(str(cards[piece.gpu_id]) for piece in item.slices)
    steps = [
        (request.created_at, RequestState.PENDING, "", {"actor": request.user}, "submitted"),
        (
            item.started_at,
            RequestState.SCHEDULED,
            RequestState.PENDING,
            {"actor_name": "scheduler"},
            f"placed on {where}",
        ),
        (
            item.started_at,
            RequestState.RUNNING,
            RequestState.SCHEDULED,
            {"actor_name": AGENT},
            "process started",
        ),
        (
            item.ended_at,
            item.outcome,
            RequestState.RUNNING,
            {"actor_name": AGENT},
            exit_reason(item.exit_code),
        ),
    ]
    events = []
    for at, to_state, from_state, who, reason in steps:
        event = build_event(request, to_state, from_state=from_state, reason=reason, **who)
        event.created_at = at
        events.append(event)
    return events
