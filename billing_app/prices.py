"""The price of a slice: THE owner of what a share of a card costs per hour and over a period.

`hourly_usd` and `period_usd` are the arithmetic every path uses (the estimate, quotes, metering, the
ledger's burn rate, budgets, what-if); `price_in_force`, `share_multiplier` and `slice_usd_per_hour`
read the catalog at one instant; `PriceBook` reads it once over a range for many slices and says which
pool's price bills a slice of a billing mode. Callers round as they show or store the amount (cents on a
quote, 10 places on a ledger entry), never before.

History semantics: a PoolPrice row applies from its effective_from (inclusive) until the next row of
the same pool starts (exclusive); two rows with the same effective_from: the later-created wins. The
same holds for SharePremium rows per slice size. Prices are USD per whole GPU-hour (Decimal).
"""

import datetime as dt
from collections import defaultdict
from decimal import Decimal

from django.db.models import OuterRef, Q, Subquery

from billing_app.constants import PRICE_QUANTUM
from billing_app.models import PoolPrice, SharePremium
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Pool

ONE = Decimal(1)
SECONDS_PER_HOUR = 3600


def hourly_usd(
    usd_per_gpu_hour: Decimal, gpu_milli: int, num_gpus: int = 1, multiplier: Decimal = ONE
) -> Decimal:
    """USD per hour, unrounded, for gpu_milli (1..1000) on each of num_gpus cards at a per-GPU-hour
    price: the price * the share (milli/1000) * the operator's premium or discount on that size."""
    return usd_per_gpu_hour * gpu_milli * num_gpus / MILLI_PER_GPU * multiplier


def period_usd(usd_per_hour: Decimal, seconds) -> Decimal:
    """USD, unrounded, for `seconds` (Decimal or int) at `usd_per_hour` (an `hourly_usd`)."""
    return usd_per_hour * seconds / SECONDS_PER_HOUR


def slice_usd_per_gpu_hour(usd_per_gpu_hour: Decimal, multiplier: Decimal = ONE) -> Decimal:
    """What a slice pays per GPU-hour, unrounded: the card's price * the premium or discount on its size
    (what a ledger entry records, rounded to PRICE_QUANTUM)."""
    return usd_per_gpu_hour * multiplier


class NoPriceInForce(LookupError):
    """Nothing is priced for that pool or model and capacity type at that instant."""


def price_in_force(pool_or_model: Pool | str, capacity_type: str, at: dt.datetime) -> Decimal:
    """USD per whole GPU-hour in force at `at` (aware) for `capacity_type` ("on-demand" or "spot").

    - A pool of that capacity type: its own price history (spot pools: what their feed wrote).
    - A GPU model name, or a pool of the other capacity type (an on-demand card billed at spot, or
      the reverse): the lowest price in force at `at` among the pools of that model and capacity type.

    Raises NoPriceInForce when none applies; ValueError for a naive `at`.
    """
    if at.tzinfo is None:
        raise ValueError("`at` must be timezone-aware (UTC).")
    if isinstance(pool_or_model, Pool) and pool_or_model.capacity_type == capacity_type:
        row = _latest(PoolPrice.objects.filter(pool=pool_or_model), at)
        if row is None:
            raise NoPriceInForce(f"{pool_or_model.name} has no price in force at {at.isoformat()}.")
        return row.usd_per_gpu_hour
    model = pool_or_model.gpu_model if isinstance(pool_or_model, Pool) else pool_or_model
    rows = PoolPrice.objects.in_force(at).filter(pool__gpu_model=model, pool__capacity_type=capacity_type)
    lowest = rows.order_by("usd_per_gpu_hour").values_list("usd_per_gpu_hour", flat=True).first()
    if lowest is None:
        raise NoPriceInForce(f"No {capacity_type} price for {model} in force at {at.isoformat()}.")
    return lowest


def share_multiplier(gpu_milli: int, at: dt.datetime) -> Decimal:
    """The operator's premium or discount on slices of exactly gpu_milli at `at`; 1 where none is set."""
    row = _latest(SharePremium.objects.filter(gpu_milli=gpu_milli), at)
    return row.multiplier if row is not None else ONE


def slice_usd_per_hour(
    pool_or_model: Pool | str, capacity_type: str, gpu_milli: int, at: dt.datetime, num_gpus: int = 1
) -> Decimal:
    """What gpu_milli on each of num_gpus cards costs per hour at `at`, unrounded: the card's price * its
    share (milli/1000) * the share's premium or discount."""
    per_gpu = price_in_force(pool_or_model, capacity_type, at)
    return hourly_usd(per_gpu, gpu_milli, num_gpus, share_multiplier(gpu_milli, at))


class PriceBook:
    """THE seam to the price catalog: the pools' prices and the share premiums over [start, end), read
    once (three queries) for any number of slices, as a metering chunk or a team's burn rate asks."""

    def __init__(self, start: dt.datetime, end: dt.datetime):
        self.start, self.end = start, end
        self._priced = defaultdict(list)  # (GPU model, capacity type) -> pools with any price
        for pk, model, kind in (
            Pool.objects.filter(prices__isnull=False)
            .values_list("pk", "gpu_model", "capacity_type")
            .distinct()
        ):
            self._priced[(model, kind)].append(pk)
        # Per pool, the row in force at `start` and every later one before `end`: no earlier row can
        # be in force or split any time in the range.
        in_force = PoolPrice.objects.filter(pool=OuterRef("pk"), effective_from__lte=start).order_by(
            "-effective_from", "-id"
        )
        at_start = Pool.objects.annotate(price=Subquery(in_force.values("pk")[:1])).values("price")
        self._prices = defaultdict(list)  # pool id -> [(effective_from, USD per GPU-hour)] in order
        for pool_id, effective_from, usd in (
            PoolPrice.objects.filter(Q(pk__in=at_start) | Q(effective_from__gt=start, effective_from__lt=end))
            .order_by("pool_id", "effective_from", "id")
            .values_list("pool_id", "effective_from", "usd_per_gpu_hour")
        ):
            self._prices[pool_id].append((effective_from, usd))
        self._premiums = defaultdict(list)  # slice size -> [(effective_from, multiplier)] in order
        for milli, effective_from, multiplier in (
            SharePremium.objects.filter(effective_from__lt=end)
            .order_by("gpu_milli", "effective_from", "id")
            .values_list("gpu_milli", "effective_from", "multiplier")
        ):
            self._premiums[milli].append((effective_from, multiplier))

    def pieces(self, pool: Pool, capacity_type: str, gpu_milli: int, start: dt.datetime, end: dt.datetime):
        """[(from, to, USD per GPU-hour)] covering [start, end) (within the book's range) for slices of
        gpu_milli.

        The price of `capacity_type` capacity of the pool's GPU model: the pool's own price when the
        pool is of that type, else the cheapest pool of that model and type (spot billing on on-demand
        capacity pays the spot price); the pool's own price when no such pool is priced, 0 while
        nothing is. Times the operator's premium or discount on slices of that size (a SharePremium),
        as slice_usd_per_gpu_hour prices them, rounded to the catalog's PRICE_QUANTUM; a
        premium that changes also splits the time."""
        if not (self.start <= start < end <= self.end):
            raise ValueError(f"[{start}, {end}) is not within the price book's [{self.start}, {self.end})")
        pools = [pool.pk]
        if pool.capacity_type != capacity_type:
            pools = self._priced.get((pool.gpu_model, capacity_type)) or pools
        rows = [(pk, at, usd) for pk in pools for at, usd in self._prices.get(pk, ()) if at < end]
        premiums = [(at, m) for at, m in self._premiums.get(gpu_milli, ()) if at < end]

        def price_at(at: dt.datetime) -> Decimal:
            in_force = {pk: usd for pk, since, usd in rows if since <= at}  # the last in order wins
            multiplier = ONE
            for since, value in premiums:
                if since <= at:
                    multiplier = value
            lowest = min(in_force.values(), default=Decimal(0))
            return slice_usd_per_gpu_hour(lowest, multiplier).quantize(PRICE_QUANTUM)

        changes = {at for _, at, _ in rows} | {at for at, _ in premiums}
        instants = sorted({start} | {at for at in changes if start < at < end})
        pieces = []
        for begin, finish in zip(instants, [*instants[1:], end], strict=True):
            price = price_at(begin)
            if pieces and pieces[-1][2] == price:
                pieces[-1] = (pieces[-1][0], finish, price)
            else:
                pieces.append((begin, finish, price))
        return pieces

    def price_now(self, pool: Pool, capacity_type: str, gpu_milli: int, at: dt.datetime) -> Decimal:
        """USD per GPU-hour in force at `at` for a slice of gpu_milli (what a running slice burns)."""
        return self.pieces(pool, capacity_type, gpu_milli, at, at + dt.timedelta(seconds=1))[0][2]

    def hourly_usd(
        self, pool: Pool, capacity_type: str, gpu_milli: int, at: dt.datetime, num_gpus: int = 1
    ) -> Decimal:
        """USD per hour, unrounded, that gpu_milli on each of num_gpus cards of `pool` billed as
        `capacity_type` costs at `at`: the per-GPU-hour price a ledger entry would record, times the share."""
        return hourly_usd(self.price_now(pool, capacity_type, gpu_milli, at), gpu_milli, num_gpus)


def price_book_at(at: dt.datetime) -> PriceBook:
    """The prices in force at `at` (for `PriceBook.price_now(..., at)`)."""
    return PriceBook(at, at + dt.timedelta(seconds=1))


def price_changes(pool: Pool, start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, Decimal]]:
    """The pool's price in force at `start` and every change in (start, end): (from, USD per GPU-hour),
    in time order; one row per instant (the later-created wins). What splits a metered segment."""
    rows = PoolPrice.objects.filter(pool=pool).filter(Q(effective_from__gt=start, effective_from__lt=end))
    first = _latest(PoolPrice.objects.filter(pool=pool), start)
    changes: dict[dt.datetime, Decimal] = {start: first.usd_per_gpu_hour} if first else {}
    for row in rows.order_by("effective_from", "id"):
        changes[row.effective_from] = row.usd_per_gpu_hour
    return sorted(changes.items())


def _latest(rows, at: dt.datetime):
    return rows.filter(effective_from__lte=at).order_by("-effective_from", "-id").first()
