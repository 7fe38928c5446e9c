"""Metering: turning allocation segments into ledger entries, exactly and idempotently.

Each allocation (one card, one share, one billing mode) is billed from where its last ledger entry
ended (its watermark, or its start) up to its end, or up to `now - settings.METERING_SETTLE_S` while open,
split wherever the price in force changes and at each month's start. Allocations are metered
`METERING_CHUNK` at a time, each chunk in its own transaction under its rows' locks and in a fixed
number of queries; an entry is unique per (allocation, start): a retry, a replay or a second worker
finds the watermarks moved and writes nothing; a run killed midway keeps the chunks it finished and
the next run carries on from their watermarks.
"""

import datetime as dt
import itertools
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.utils import timezone

from billing_app.constants import AMOUNT_QUANTUM
from billing_app.models import LedgerEntry
from billing_app.prices import PriceBook, hourly_usd, period_usd
from infra.bulk_insert import insert_rows, update_rows
from scheduler_app.models import Allocation, GpuRequest

# Allocations billed in one transaction: a chunk costs the same eight queries whatever its size, and
# holds its requests' row locks only for as long as it takes (a few milliseconds).
METERING_CHUNK = 200


def segment_costs_usd(allocations, now: dt.datetime) -> list[Decimal]:
    """What each segment costs from its start to its end (to `now` while open), at the prices in force
    throughout, as metering bills it (the request page's figures; metering may not have caught up),
    priced from one PriceBook however many segments."""
    spans = [(a.started_at, a.ended_at or now) for a in allocations]
    billed = [(start, until) for start, until in spans if until > start]
    if not billed:
        return [Decimal(0)] * len(spans)
    book = PriceBook(min(start for start, _ in billed), max(until for _, until in billed))
    costs = []
    for allocation, (start, until) in zip(allocations, spans, strict=True):
        if until <= start:
            costs.append(Decimal(0))
            continue
        pieces = book.pieces(
            allocation.gpu.node.pool, allocation.billing_mode, allocation.milli, start, until
        )
        costs.append(
            sum(
                (amount_usd(price, allocation.milli, exact_seconds(a, b)) for a, b, price in pieces),
                Decimal(0),
            )
        )
    return costs


def amount_usd(usd_per_gpu_hour: Decimal, milli: int, seconds: Decimal) -> Decimal:
    """USD for `milli` of a card for `seconds` at a per-GPU-hour price (the premium already in it, as a
    ledger entry records it), to 10 decimal places; metering rounds each entry, never the hourly price."""
    return period_usd(hourly_usd(usd_per_gpu_hour, milli), seconds).quantize(AMOUNT_QUANTUM)


def exact_seconds(start: dt.datetime, end: dt.datetime) -> Decimal:
    delta = end - start
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds).scaleb(-6)


def month_start(at: dt.datetime) -> dt.datetime:
    at = at.astimezone(dt.UTC)
    return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month(at: dt.datetime) -> dt.datetime:
    first = month_start(at)
    return (first + dt.timedelta(days=32)).replace(day=1)


def _month_cuts(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    cuts, cut = [], next_month(start)
    while cut < end:
        cuts.append(cut)
        cut = next_month(cut)
    return cuts


def meter_allocations(allocation_ids, now: dt.datetime) -> list[LedgerEntry]:
    """Bill these allocations, each from its watermark up to its end (or now - settle), in one
    transaction; returns the entries written or extended. Where the time carries on at the last
    entry's price within its month, that entry is extended (its amount recomputed from its whole
    length), so an open slice metered every few seconds keeps one entry per price and month rather
    than one per run."""
    settled = now - dt.timedelta(seconds=settings.METERING_SETTLE_S)
    with transaction.atomic():
        # The requests first, in id order, as the lifecycle owner and the billing switch lock them
        # before their slices: the entries' foreign key to a request would otherwise wait on a
        # transition holding it (a deadlock).
        requests = Allocation.objects.filter(pk__in=allocation_ids).values("request_id")
        list(
            GpuRequest.objects.select_for_update(no_key=True)
            .filter(pk__in=requests)
            .order_by("pk")
            .values_list("pk")
        )
        allocations = list(
            Allocation.objects.select_for_update(of=("self",))
            .select_related("request", "gpu__node__pool")
            .filter(pk__in=allocation_ids)
            .order_by("pk")
        )
        # Read after the locks, in a statement of its own, so it sees what a worker that held them wrote.
        last_entries = LedgerEntry.objects.filter(allocation=OuterRef("pk")).order_by("-end")
        last_ids = Allocation.objects.filter(pk__in=allocation_ids).values(
            last=Subquery(last_entries.values("pk")[:1])
        )
        last = {entry.allocation_id: entry for entry in LedgerEntry.objects.filter(pk__in=last_ids)}
        spans = {}
        for allocation in allocations:
            entry = last.get(allocation.pk)
            watermark = entry.end if entry else allocation.started_at
            until = min(allocation.ended_at, settled) if allocation.ended_at else settled
            if until > watermark:
                spans[allocation.pk] = (watermark, until)
        if not spans:
            return []
        book = PriceBook(min(a for a, _ in spans.values()), max(b for _, b in spans.values()))
        extended, created = [], []
        for allocation in allocations:
            if allocation.pk not in spans:
                continue
            entry, more = _bill(allocation, last.get(allocation.pk), *spans[allocation.pk], book)
            if entry is not None:
                extended.append(entry)
            created.extend(more)
        update_rows(LedgerEntry, extended, ["end", "seconds", "amount_usd"])
        return extended + insert_rows(LedgerEntry, created)


def _bill(allocation: Allocation, last: LedgerEntry | None, watermark, until, book: PriceBook):
    """One allocation's time from its watermark to `until`: (its last entry extended, or None; the new
    entries), split at each price change and month start."""
    pool = allocation.gpu.node.pool
    cuts = _month_cuts(watermark, until)
    spans = [
        (a, b, price)
        for begin, finish, price in book.pieces(
            pool, allocation.billing_mode, allocation.milli, watermark, until
        )
        for a, b in itertools.pairwise([begin, *(c for c in cuts if begin < c < finish), finish])
    ]
    extended = None
    first_start, first_end, first_price = spans[0]
    if last and last.usd_per_gpu_hour == first_price and month_start(last.start) == month_start(first_start):
        last.end = first_end
        last.seconds = exact_seconds(last.start, first_end)
        last.amount_usd = amount_usd(first_price, last.milli, last.seconds)
        extended = last
        spans = spans[1:]
    entries = [
        LedgerEntry(
            team_id=allocation.request.team_id,
            user_id=allocation.request.user_id,
            request_id=allocation.request_id,
            allocation=allocation,
            pool=pool,
            billing_mode=allocation.billing_mode,
            milli=allocation.milli,
            start=a,
            end=b,
            seconds=exact_seconds(a, b),
            usd_per_gpu_hour=price,
            amount_usd=amount_usd(price, allocation.milli, exact_seconds(a, b)),
        )
        for a, b, price in spans
    ]
    return extended, entries


def unmetered_allocations():
    """Allocations with time not yet in the ledger: open ones, and closed ones whose last entry does not
    end at their end (an index lookup each on the entries' (allocation, end))."""
    billed_to_end = LedgerEntry.objects.filter(allocation=OuterRef("pk"), end=OuterRef("ended_at"))
    return (
        Allocation.objects.filter(
            Q(ended_at__isnull=True) | (Q(ended_at__gt=F("started_at")) & ~Exists(billed_to_end))
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def meter_usage(now: dt.datetime | None = None) -> list[LedgerEntry]:
    """Meter every allocation with unbilled time, METERING_CHUNK to a transaction; returns the entries
    written or extended."""
    now = now or timezone.now()
    ids = list(unmetered_allocations())
    return [
        entry
        for at in range(0, len(ids), METERING_CHUNK)
        for entry in meter_allocations(ids[at : at + METERING_CHUNK], now)
    ]
