"""Reads of the price catalog: the price in force, and what a request would cost per hour."""

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import QuerySet
from django.utils import timezone

from billing_app.constants import CENT
from billing_app.models import PoolPrice, SharePremium
from billing_app.prices import hourly_usd, price_changes, share_multiplier
from scheduler_app.choices import CapacityType
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
    """What a request would cost per hour in `pool`: USD rounded half-up to cents (what the API gives),
    and unrounded (what the pages show: an eighth of a card may cost a fraction of a cent more)."""

    usd_per_hour: Decimal
    pool: str
    usd_per_gpu_hour: Decimal
    gpu_model: str
    exact_usd_per_hour: Decimal


@dataclass(frozen=True)
class HourlyPrices:
    """On-demand against spot for one GPU model: the cheapest priced pool of each capacity type with
    that model; None where no such pool is priced. Comparing like with like is what says what spot saves."""

    gpu_model: str = ""
    on_demand: HourlyPrice | None = None
    spot: HourlyPrice | None = None

    @property
    def spot_saving_percent(self) -> int | None:
        """How much less spot costs than on-demand, in whole percent (from the per-GPU rates)."""
        if self.on_demand is None or self.spot is None:
            return None
        ratio = Decimal(100) * (1 - self.spot.usd_per_gpu_hour / self.on_demand.usd_per_gpu_hour)
        return int(ratio.quantize(Decimal(1), rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class PlacementPrices:
    """The price where a request would run (None: no placement yet, or its pool is unpriced), and
    on-demand against spot for each GPU model the request allows, by model name."""

    placed: HourlyPrice | None = None
    by_model: tuple[HourlyPrices, ...] = ()
    placed_model: str = ""

    @property
    def compared(self) -> HourlyPrices:
        """The comparison for the placement's model, else for the only model allowed; empty otherwise."""
        model = self.placed_model or None
        if model is None and len(self.by_model) == 1:
            return self.by_model[0]
        return next((p for p in self.by_model if p.gpu_model == model), HourlyPrices(model or ""))


def price_per_hour(
    gpu_milli: int,
    num_gpus: int = 1,
    gpu_model: str | None = None,
    pool: Pool | None = None,
    at: dt.datetime | None = None,
    placed_pool: str = "",
) -> PlacementPrices:
    """USD per hour for gpu_milli (per card) * num_gpus as prices.hourly_usd prices it (the premium or
    discount on that slice size in it), rounded half-up to cents; in `placed_pool` (where the
    request would run), and on-demand against spot per GPU model, in the cheapest priced pool of each
    kind that the request's pool or model allows."""
    at = at or timezone.now()
    rows = list(prices_in_force(at))
    premium = share_multiplier(gpu_milli, at)

    def quote(row: PoolPrice) -> HourlyPrice:
        usd = hourly_usd(row.usd_per_gpu_hour, gpu_milli, num_gpus, premium)
        return HourlyPrice(
            usd.quantize(CENT, rounding=ROUND_HALF_UP),
            row.pool.name,
            row.usd_per_gpu_hour,
            row.pool.gpu_model,
            usd,
        )

    placed = next((quote(r) for r in rows if r.pool.name == placed_pool), None)
    cheapest: dict[tuple[str, str], PoolPrice] = {}
    for row in sorted(rows, key=lambda r: (r.usd_per_gpu_hour, r.pool.name)):
        if (pool is None or row.pool_id == pool.pk) and (not gpu_model or row.pool.gpu_model == gpu_model):
            cheapest.setdefault((row.pool.gpu_model, row.pool.capacity_type), row)
    models = sorted({model for model, _ in cheapest})
    by_model = tuple(
        HourlyPrices(
            model,
            *(
                quote(cheapest[model, kind]) if (model, kind) in cheapest else None
                for kind in (CapacityType.ON_DEMAND, CapacityType.SPOT)
            ),
        )
        for model in models
    )
    if placed is not None:
        placed_model = placed.gpu_model
    elif placed_pool:  # placed in a pool without a price: its model still picks the comparison
        placed_model = Pool.objects.filter(name=placed_pool).values_list("gpu_model", flat=True).first() or ""
    else:
        placed_model = ""
    return PlacementPrices(placed, by_model, placed_model)


@dataclass(frozen=True)
class PriceHistory:
    pool: str
    gpu_model: str
    capacity_type: str
    feed: str
    points: list[tuple[str, str]]  # (ISO time, USD per GPU-hour), the first at `since` when priced then


def price_histories(since: dt.datetime, until: dt.datetime) -> list[PriceHistory]:
    """Every priced pool's price in force at `since` and each change up to `until`, for the charts."""
    histories = []
    for pool in Pool.objects.filter(prices__isnull=False).distinct().select_related("spot_feed"):
        feed = getattr(pool, "spot_feed", None)
        changes = price_changes(pool, since, until)
        points = [(at.isoformat(), str(price)) for at, price in changes]
        histories.append(
            PriceHistory(pool.name, pool.gpu_model, pool.capacity_type, feed.kind if feed else "", points)
        )
    return sorted(histories, key=lambda h: h.pool)


def share_premiums_in_force(at: dt.datetime | None = None) -> list[SharePremium]:
    """Per slice size, the premium or discount in force at `at` (default now); sizes without one pay 1."""
    at = at or timezone.now()
    latest: dict[int, SharePremium] = {}
    for row in SharePremium.objects.filter(effective_from__lte=at).order_by(
        "gpu_milli", "-effective_from", "-id"
    ):
        latest.setdefault(row.gpu_milli, row)
    return list(latest.values())
