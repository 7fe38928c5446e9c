"""Billing's invariant: the ledger equals the slices to the second. Checked with scheduling's rules by
scheduler_app.rules.invariants.after_fault (through scheduler_app.rules.billing)."""

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from billing_app.metering import exact_seconds
from billing_app.models import LedgerEntry
from scheduler_app.models import Allocation


def billing_errors(now: dt.datetime | None = None) -> list[str]:
    """The ledger equals the slices to the second: each slice's entries follow each other from its start
    without gap or overlap, and a slice closed more than the metering settle time ago is billed exactly
    to its end. Meter first (billing_app.metering.meter_usage) for the check to mean anything."""
    return [problem for problem, _ in _billing_gaps(now)]


def billing_error_seconds(now: dt.datetime | None = None) -> Decimal:
    """Seconds billed wrongly, too many or too few, over every slice (see billing_errors)."""
    return sum((abs(error) for _, error in _billing_gaps(now)), start=Decimal(0))


def settled_by(at: dt.datetime | None = None) -> dt.datetime:
    """The first moment at which metering bills every slice closed by `at` (now) to its end."""
    return (at or timezone.now()) + _metering_settle() + dt.timedelta(seconds=1)


def _metering_settle() -> dt.timedelta:
    """How far behind its clock a metering run bills open slices."""
    return dt.timedelta(seconds=settings.METERING_SETTLE_S)


def _billing_gaps(now: dt.datetime | None):
    """(problem, seconds billed too many or too few) for each slice the ledger gets wrong."""
    settled = (now or timezone.now()) - _metering_settle()
    entries: dict[int, list] = {}
    for entry in LedgerEntry.objects.order_by("allocation_id", "start").only(
        "allocation_id", "start", "end", "seconds"
    ):
        entries.setdefault(entry.allocation_id, []).append(entry)
    for allocation in Allocation.objects.filter(started_at__lt=settled).order_by("pk"):
        billed = entries.get(allocation.pk, [])
        edge = allocation.started_at
        for entry in billed:
            if entry.start != edge or entry.seconds != exact_seconds(entry.start, entry.end):
                error = (
                    exact_seconds(edge, entry.start)
                    if entry.start < edge
                    else exact_seconds(entry.start, edge)
                )
                yield (
                    f"slice #{allocation.pk}: entry {entry.start}..{entry.end} does not follow {edge}",
                    error,
                )
            edge = entry.end
        end = allocation.ended_at
        if end is not None and end <= settled:
            billed_s = sum((e.seconds for e in billed), start=Decimal(0))
            used_s = exact_seconds(allocation.started_at, end)
            if billed_s != used_s:
                yield f"slice #{allocation.pk}: billed {billed_s} s of {used_s} s", billed_s - used_s
        elif end is not None and edge > end:
            yield f"slice #{allocation.pk}: billed to {edge}, past its end {end}", exact_seconds(end, edge)
