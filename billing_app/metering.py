"""Metering: turning allocation segments into ledger entries, exactly and idempotently.

Each allocation (one card, one share, one billing mode) is billed from where its last ledger entry
ended (its watermark, or its start) up to its end, or up to `now - settings.METERING_SETTLE_S` while open,
split wherever the price in force changes and at each month's start. Each allocation is metered in
its own transaction under its row lock, and an entry is unique per (allocation, start): a retry,
a replay or a second worker finds the watermark moved and writes nothing; a run killed midway
keeps the allocations it finished and the next run carries on from their watermarks.
"""

import datetime as dt
import itertools
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from billing_app.constants import AMOUNT_QUANTUM, PRICE_QUANTUM
from billing_app.models import LedgerEntry, PoolPrice, SharePremium
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, GpuRequest, Pool

SECONDS_PER_HOUR = 3600


def _price_pieces(pool: Pool, capacity_type: str, gpu_milli: int, start: dt.datetime, end: dt.datetime):
    """THE seam to the price catalog: [(from, to, USD per GPU-hour)] covering [start, end) for slices
    of gpu_milli.

    The price of `capacity_type` capacity of the pool's GPU model: the pool's own price when the
    pool is of that type, else the cheapest pool of that model and type (spot billing on on-demand
    capacity pays the spot price); the pool's own price when no such pool is priced, 0 while
    nothing is. Times the operator's premium or discount on slices of that size (a SharePremium),
    as the catalog's slice_usd_per_hour prices them, rounded to the catalog's PRICE_QUANTUM; a
    premium that changes also splits the time."""
    pools = [pool.pk]
    if pool.capacity_type != capacity_type:
        same = Pool.objects.filter(gpu_model=pool.gpu_model, capacity_type=capacity_type)
        others = list(same.filter(prices__isnull=False).values_list("pk", flat=True).distinct())
        pools = others or pools
    rows = list(
        PoolPrice.objects.filter(pool_id__in=pools, effective_from__lt=end).order_by(
            "pool_id", "effective_from", "id"
        )
    )
    premiums = list(
        SharePremium.objects.filter(gpu_milli=gpu_milli, effective_from__lt=end).order_by(
            "effective_from", "id"
        )
    )

    def price_at(at: dt.datetime) -> Decimal:
        in_force = {}
        for row in rows:
            if row.effective_from <= at:
                in_force[row.pool_id] = row.usd_per_gpu_hour
        multiplier = Decimal(1)
        for premium in premiums:
            if premium.effective_from <= at:
                multiplier = premium.multiplier
        return (min(in_force.values(), default=Decimal(0)) * multiplier).quantize(PRICE_QUANTUM)

    changes = {r.effective_from for r in rows} | {p.effective_from for p in premiums}
    instants = sorted({start} | {at for at in changes if start < at < end})
    pieces = []
    for begin, finish in zip(instants, [*instants[1:], end], strict=True):
        price = price_at(begin)
        if pieces and pieces[-1][2] == price:
            pieces[-1] = (pieces[-1][0], finish, price)
        else:
            pieces.append((begin, finish, price))
    return pieces


def price_now(pool: Pool, capacity_type: str, gpu_milli: int, at: dt.datetime) -> Decimal:
    """USD per GPU-hour in force at `at` for a slice of gpu_milli (what a running slice burns)."""
    return _price_pieces(pool, capacity_type, gpu_milli, at, at + dt.timedelta(seconds=1))[0][2]


def segment_cost_usd(allocation: Allocation, now: dt.datetime) -> Decimal:
    """What a segment costs from its start to its end (to `now` while open), at the prices in force
    throughout, as metering bills it (the request page's figure; metering may not have caught up)."""
    until = allocation.ended_at or now
    if until <= allocation.started_at:
        return Decimal(0)
    pieces = _price_pieces(
        allocation.gpu.node.pool, allocation.billing_mode, allocation.milli, allocation.started_at, until
    )
    return sum(
        (amount_usd(price, allocation.milli, exact_seconds(a, b)) for a, b, price in pieces), Decimal(0)
    )


def amount_usd(usd_per_gpu_hour: Decimal, milli: int, seconds: Decimal) -> Decimal:
    """USD for `milli` of a card for `seconds` at a per-GPU-hour price, to 10 decimal places."""
    exact = usd_per_gpu_hour * milli * seconds / (MILLI_PER_GPU * SECONDS_PER_HOUR)
    return exact.quantize(AMOUNT_QUANTUM)


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


def meter_allocation(allocation_id: int, now: dt.datetime) -> list[LedgerEntry]:
    """Bill one allocation from its watermark up to its end (or now - settle); returns the entries
    written or extended. Where the time carries on at the last entry's price within its month, that
    entry is extended (its amount recomputed from its whole length), so an open slice metered every
    few seconds keeps one entry per price and month rather than one per run."""
    request_id = Allocation.objects.filter(pk=allocation_id).values_list("request_id", flat=True).get()
    with transaction.atomic():
        # The request first, as the lifecycle owner and the billing switch lock it before its slices:
        # the entries' foreign key to it would otherwise wait on a transition holding it (a deadlock).
        list(GpuRequest.objects.select_for_update(no_key=True).filter(pk=request_id).values_list("pk"))
        allocation = (
            Allocation.objects.select_for_update(of=("self",))
            .select_related("request", "gpu__node__pool")
            .get(pk=allocation_id)
        )
        last = allocation.ledger_entries.order_by("-end").first()
        watermark = last.end if last else allocation.started_at
        settled = now - dt.timedelta(seconds=settings.METERING_SETTLE_S)
        until = min(allocation.ended_at, settled) if allocation.ended_at else settled
        if until <= watermark:
            return []
        pool = allocation.gpu.node.pool
        cuts = _month_cuts(watermark, until)
        spans = [
            (a, b, price)
            for begin, finish, price in _price_pieces(
                pool, allocation.billing_mode, allocation.milli, watermark, until
            )
            for a, b in itertools.pairwise([begin, *(c for c in cuts if begin < c < finish), finish])
        ]
        written = []
        first_start, first_end, first_price = spans[0]
        if (
            last
            and last.usd_per_gpu_hour == first_price
            and month_start(last.start) == month_start(first_start)
        ):
            last.end = first_end
            last.seconds = exact_seconds(last.start, first_end)
            last.amount_usd = amount_usd(first_price, last.milli, last.seconds)
            last.save(update_fields=["end", "seconds", "amount_usd"])
            written.append(last)
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
        return written + LedgerEntry.objects.bulk_create(entries)


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
    """Meter every allocation with unbilled time, each in its own transaction; returns the entries
    written or extended."""
    now = now or timezone.now()
    return [entry for pk in list(unmetered_allocations()) for entry in meter_allocation(pk, now)]
