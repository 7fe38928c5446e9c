"""The price in force at an instant: the one read that metering, quotes and the pricing page share.

History semantics: a PoolPrice row applies from its effective_from (inclusive) until the next row of
the same pool starts (exclusive); two rows with the same effective_from: the later-created wins. The
same holds for SharePremium rows per slice size. Prices are USD per whole GPU-hour (Decimal).
"""

import datetime as dt
from decimal import Decimal

from django.db.models import Q

from billing_app.models import PoolPrice, SharePremium
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Pool

ONE = Decimal(1)


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
    return per_gpu * gpu_milli * num_gpus / MILLI_PER_GPU * share_multiplier(gpu_milli, at)


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
