"""The one writer of allocation segments: Allocation rows, a request's slice of one card (milli-GPU
1..1000, GPU memory in MiB) from started_at until ended_at (open while None), billed at one mode.

Callers decide and lock; these functions only write, inside the caller's transaction. A segment is
opened under its card's no-key lock and the request's row lock (services.placement.place), closed or
reopened under the request's row lock (the lifecycle owner, the billing switch). Nothing here writes an
event or publishes: the state change that calls it does.
"""

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence

from django.db.models import F, QuerySet, Value
from django.db.models.functions import Greatest

from infra.bulk_insert import insert_rows
from scheduler_app.models import Allocation, GpuRequest


def add_segments(segments: Sequence[Allocation]) -> list[Allocation]:
    """Write new segments built by the caller (open ones for a start; closed ones for recorded history)
    in one statement; sets their pks."""
    return insert_rows(Allocation, segments)


def close_segments(request_ids: Iterable[int], at: dt.datetime) -> int:
    """End the open segments of these requests at `at`; returns how many closed."""
    return _close(Allocation.objects.committed().filter(request_id__in_array=list(request_ids)), at)


def start_open_segments_at(request_id: int, at: dt.datetime) -> int:
    """A run that started later than its placement (its cluster manager held it pending) is billed from
    its start: the request's open segments that began before `at` begin at it. Returns how many moved."""
    return Allocation.objects.filter(request_id=request_id, ended_at__isnull=True, started_at__lt=at).update(
        started_at=at
    )


def reopen_segments(
    request: GpuRequest,
    segments: Sequence[Allocation],
    *,
    billing_mode: str,
    at: dt.datetime,
    to_cards: Mapping[int, int] | None = None,
    to_instances: Mapping[int, str] | None = None,
) -> list[Allocation]:
    """Close these open segments of `request` at `at` and open a copy of each, billed `billing_mode`
    from then: each segment keeps one rate. `to_cards` (segment pk -> card id): a copy on that card
    instead of the same one, for a slice that runs on another card of its node; `to_instances`
    (segment pk -> profile@start): on that MIG instance, of the same profile."""
    _close(Allocation.objects.filter(pk__in=[s.pk for s in segments]), at)
    return add_segments(
        [
            Allocation(
                request=request,
                gpu_id=(to_cards or {}).get(s.pk, s.gpu_id),
                milli=s.milli,
                gpu_memory_mib=s.gpu_memory_mib,
                mig_instance=(to_instances or {}).get(s.pk, s.mig_instance),
                mig_slots=s.mig_slots,
                billing_mode=billing_mode,
                borrowed=s.borrowed,
                started_at=max(at, s.started_at),
            )
            for s in segments
        ]
    )


def resize_next_run(request_id: int, milli: int) -> None:
    """The share (milli-GPU per card) the request's next run's segments take: set while it is requeued,
    under its row lock. Its open segments keep their share until they close."""
    GpuRequest.objects.filter(pk=request_id).update(gpu_milli=milli)


def _close(segments: QuerySet[Allocation], at: dt.datetime) -> int:
    # A segment placed at a pass's clock a moment after `at` was taken ends at its own start, never before.
    return segments.update(ended_at=Greatest(Value(at), F("started_at")))
