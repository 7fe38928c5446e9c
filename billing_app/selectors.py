"""Reads of the price catalog: the price in force, and what a request would cost per hour."""

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import QuerySet
from django.utils import timezone

from billing_app.constants import CENT
from billing_app.models import PoolPrice
from scheduler_app.choices import CapacityType
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Pool


def prices_in_force(at: dt.datetime | None = None) -> QuerySet[PoolPrice]:
    """The price in force at `at` (default now) of every priced pool, with its pool; one query."""
    return PoolPrice.objects.in_force(at or timezone.now()).select_related("pool").order_by("pool__name")


def price_in_force(pool: Pool, at: dt.datetime | None = None) -> PoolPrice | None:
    """The pool's latest price with effective_from ≤ at (default now); None while it is unpriced."""
    return (
        pool.prices.filter(effective_from__lte=at or timezone.now())
        .order_by("-effective_from", "-id")
        .first()
    )


@dataclass(frozen=True)
class HourlyPrice:
    """What a request would cost per hour in `pool`: USD, rounded half-up to cents."""

    usd_per_hour: Decimal
    pool: str
    usd_per_gpu_hour: Decimal
    gpu_model: str


@dataclass(frozen=True)
class HourlyPrices:
    """The cheapest matching priced pool of each capacity type; None where no such pool is priced."""

    on_demand: HourlyPrice | None = None
    spot: HourlyPrice | None = None

    @property
    def spot_saving_percent(self) -> int | None:
        """How much less spot costs than on-demand, in whole percent (from the per-GPU rates); only
        when both are the same GPU model, since comparing different cards says nothing about spot."""
        if self.on_demand is None or self.spot is None or self.on_demand.gpu_model != self.spot.gpu_model:
            return None
        ratio = Decimal(100) * (1 - self.spot.usd_per_gpu_hour / self.on_demand.usd_per_gpu_hour)
        return int(ratio.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def price_per_hour(
    gpu_milli: int,
    num_gpus: int = 1,
    gpu_model: str | None = None,
    pool: Pool | None = None,
    at: dt.datetime | None = None,
) -> HourlyPrices:
    """USD per hour for gpu_milli (per card) * num_gpus, on-demand and spot, in the cheapest priced pool
    of each capacity type that the request's pool or GPU model allows: usd_per_gpu_hour * gpu_milli/1000
    * num_gpus, rounded half-up to cents."""
    rows = prices_in_force(at)
    if pool is not None:
        rows = rows.filter(pool=pool)
    if gpu_model:
        rows = rows.filter(pool__gpu_model=gpu_model)
    cheapest: dict[str, PoolPrice] = {}
    for row in sorted(rows, key=lambda r: (r.usd_per_gpu_hour, r.pool.name)):
        cheapest.setdefault(row.pool.capacity_type, row)

    def quote(capacity_type: str) -> HourlyPrice | None:
        row = cheapest.get(capacity_type)
        if row is None:
            return None
        usd = row.usd_per_gpu_hour * gpu_milli * num_gpus / MILLI_PER_GPU
        return HourlyPrice(
            usd.quantize(CENT, rounding=ROUND_HALF_UP),
            row.pool.name,
            row.usd_per_gpu_hour,
            row.pool.gpu_model,
        )

    return HourlyPrices(on_demand=quote(CapacityType.ON_DEMAND), spot=quote(CapacityType.SPOT))
