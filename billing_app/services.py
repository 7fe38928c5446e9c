"""Every write to the price catalog goes through a function here: validated (a ValidationError naming
the field; nothing written), written in one transaction, logged as an Event on the pool."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.events import log_event
from billing_app.constants import MAX_USD_PER_GPU_HOUR, PRICE_DECIMAL_PLACES, PUBLIC_PRICES_RELATIVE_PATH
from billing_app.models import PoolPrice, SharePremium
from billing_app.permissions import can_set_prices
from billing_app.public_prices import PublicPrices
from billing_app.selectors import price_in_force
from infra.echo import echoed
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, Pool
from teams.permissions import require

SYSTEM = "system"


def set_pool_price(
    pool: Pool,
    usd_per_gpu_hour,
    *,
    actor,
    effective_from: dt.datetime | None = None,
    source: str = "",
    actor_name: str = "",
    backdated: bool = False,
) -> PoolPrice:
    """Price a pool in USD per whole GPU-hour from effective_from (default now; never in the past).

    `actor` is a staff user, or None for a system part named by actor_name (the demo seed,
    the import command). The older prices stay: each applies until the next one starts.
    `backdated`: a system part pricing a recorded past (the demo's week of history) may start the price
    in the past on a pool nothing has used yet, since no use then changes its price.
    """
    if actor is not None:
        require(can_set_prices(actor), "Only platform operators set prices.")
    now = timezone.now()
    price = parse_usd_per_gpu_hour(usd_per_gpu_hour)
    if effective_from is None:
        effective_from = now
    elif timezone.is_naive(effective_from):
        raise ValidationError({"effective_from": "Give the timezone, e.g. 2025-01-31T12:00:00Z."})
    elif effective_from < now and not (backdated and actor is None and not _ever_used(pool)):
        raise ValidationError(
            {"effective_from": "A price cannot start in the past: it would change what was already billed."}
        )
    source = source.strip() or (f"set by {actor.get_username()}" if actor is not None else SYSTEM)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        before = price_in_force(locked, at=effective_from)
        row = PoolPrice.objects.create(
            pool=locked,
            usd_per_gpu_hour=price,
            effective_from=effective_from.astimezone(dt.UTC),
            source=source,
            created_by=actor,
        )
        log_event(
            locked,
            "priced",
            actor=actor,
            actor_name=actor_name or SYSTEM,
            reason=f"price from {row.effective_from:%Y-%m-%d %H:%M:%S} UTC; source: {source}",
            data={
                "usd_per_gpu_hour": {
                    "from": str(before.usd_per_gpu_hour) if before else None,
                    "to": str(price),
                },
                "effective_from": row.effective_from.isoformat(),
            },
        )
    return row


def parse_usd_per_gpu_hour(value) -> Decimal:
    """A Decimal, an int or a decimal string; never a float (it cannot hold most cents exactly)."""
    field = "usd_per_gpu_hour"
    if isinstance(value, bool | float) or not isinstance(value, Decimal | int | str):
        raise ValidationError({field: "Give the price as a decimal string such as '2.50', not a float."})
    try:
        price = Decimal(value.strip() if isinstance(value, str) else value)
    except InvalidOperation:
        raise ValidationError({field: f"{echoed(value)!r} is not a number."}) from None
    if not price.is_finite() or price <= 0:
        raise ValidationError({field: "A price must be more than 0 USD per GPU-hour."})
    if price > MAX_USD_PER_GPU_HOUR:
        raise ValidationError({field: f"A price must be at most {MAX_USD_PER_GPU_HOUR} USD per GPU-hour."})
    if -price.as_tuple().exponent > PRICE_DECIMAL_PLACES:
        raise ValidationError({field: f"At most {PRICE_DECIMAL_PLACES} decimal places."})
    return price.quantize(Decimal(1).scaleb(-PRICE_DECIMAL_PLACES))


def default_public_prices_path() -> Path:
    return (settings.BASE_DIR / PUBLIC_PRICES_RELATIVE_PATH).resolve()


@dataclass(frozen=True)
class PoolPricing:
    """What pricing a pool from the public medians did: the new row, or why none was written."""

    pool: Pool
    price: PoolPrice | None
    note: str


def _ever_used(pool: Pool) -> bool:
    return Allocation.objects.filter(gpu__node__pool=pool).exists()


def price_pools_from_public(
    public: PublicPrices,
    *,
    actor=None,
    only_unpriced: bool = False,
    actor_name: str = "import_prices",
    since: dt.datetime | None = None,
) -> list[PoolPricing]:
    """Price each pool at the public median for its GPU model and capacity type (on-demand pools from
    on-demand prices, spot pools from spot prices). A pool whose model or capacity type has no public
    price stays as it is: no price is ever made up. `only_unpriced` leaves priced pools alone. `since`:
    from then rather than now, for a recorded past (see set_pool_price's `backdated`)."""
    results = []
    with transaction.atomic():
        for pool in Pool.objects.order_by("name"):
            median = public.median_for(pool.gpu_model, pool.capacity_type)
            current = price_in_force(pool)
            if median is None:
                note = f"no public {pool.capacity_type} price for {pool.gpu_model}"
            elif only_unpriced and pool.prices.exists():
                note = "already priced"
            elif current is not None and current.usd_per_gpu_hour == median.usd_per_gpu_hour:
                note = "unchanged"
            else:
                source = (
                    f"median of {median.count} public {median.capacity_type} prices for "
                    f"{median.gpu_model} in {_shown(public.path)}"
                )
                row = set_pool_price(
                    pool,
                    median.usd_per_gpu_hour,
                    actor=actor,
                    source=source,
                    actor_name=actor_name,
                    effective_from=since,
                    backdated=since is not None,
                )
                results.append(PoolPricing(pool, row, source))
                continue
            results.append(PoolPricing(pool, None, note))
    return results


def _shown(path: Path) -> str:
    """The file as people find it: relative to the directory beside the repository (shared/...)."""
    try:
        return str(Path(path).resolve().relative_to(settings.BASE_DIR.resolve().parent))
    except ValueError:
        return str(path)


def set_share_premium(
    gpu_milli: int, multiplier, *, actor, effective_from: dt.datetime | None = None
) -> SharePremium:
    """An operator's premium (> 1) or discount (< 1) on slices of exactly gpu_milli, from effective_from
    (default now; never in the past, like prices). 1 removes it; older rows stay for past usage."""
    require(can_set_prices(actor), "Only platform operators set prices.")
    if isinstance(gpu_milli, bool) or not isinstance(gpu_milli, int) or not 1 <= gpu_milli <= MILLI_PER_GPU:
        raise ValidationError({"gpu_milli": f"A slice size from 1 to {MILLI_PER_GPU} milli-GPU."})
    try:
        value = Decimal(multiplier) if isinstance(multiplier, str | int | Decimal) else None
    except InvalidOperation:
        value = None
    if (
        value is None
        or not value.is_finite()
        or not Decimal(0) < value <= 10
        or -value.as_tuple().exponent > 4
    ):
        raise ValidationError(
            {"multiplier": "A decimal string above 0, at most 10, 4 places: '1.10' is +10 %."}
        )
    now = timezone.now()
    effective_from = effective_from or now
    if effective_from < now:
        raise ValidationError({"effective_from": "A premium cannot start in the past."})
    with transaction.atomic():
        row = SharePremium.objects.create(
            gpu_milli=gpu_milli, multiplier=value, effective_from=effective_from, created_by=actor
        )
        log_event(
            row,
            "share-premium",
            actor=actor,
            reason=f"slices of {gpu_milli} milli-GPU pay x{value} from {effective_from:%Y-%m-%d %H:%M} UTC",
            data={"gpu_milli": gpu_milli, "multiplier": str(value)},
        )
    return row
