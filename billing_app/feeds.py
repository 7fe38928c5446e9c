"""Writes that the spot feeds make: an operator choosing a pool's feed, the periodic advance of the
occupancy and replay feeds, and an uploaded price file (all rows or none)."""

import datetime as dt
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.events import log_event
from billing_app.models import FeedKind, PoolPrice, SpotFeed
from billing_app.permissions import can_set_prices
from billing_app.prices import NoPriceInForce, price_in_force
from billing_app.spot_feeds import (
    REPLAY_FILES,
    occupancy,
    occupancy_price,
    parse_price_upload,
    replay_price,
    replay_series,
)
from scheduler_app.choices import CapacityType
from scheduler_app.models import Pool
from teams.permissions import require

FEED_ACTOR = "spot_feed"


def set_spot_feed(
    pool: Pool,
    *,
    actor,
    kind: str,
    min_fraction=None,
    max_fraction=None,
    replay_file: str | None = None,
    replay_series_key: str | None = None,
    replay_speedup: int | None = None,
    actor_name: str = "",
) -> SpotFeed:
    """Choose what drives a spot pool's price (validated; ValidationError naming the field). A replay
    restarts from the recording's first instant now."""
    if actor is not None:
        require(can_set_prices(actor), "Only platform operators set prices.")
    if not pool.is_spot():
        raise ValidationError({"pool": f"{pool.name} is on-demand; feeds drive spot pools only."})
    if kind not in FeedKind.values:
        raise ValidationError({"kind": f"Choose one of {', '.join(FeedKind.values)}."})
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        feed = SpotFeed.objects.filter(pool=locked).first() or SpotFeed(pool=locked)
        feed.kind = kind
        if min_fraction is not None:
            feed.min_fraction = _fraction("min_fraction", min_fraction)
        if max_fraction is not None:
            feed.max_fraction = _fraction("max_fraction", max_fraction)
        if feed.min_fraction > feed.max_fraction:
            raise ValidationError({"min_fraction": "The idle price cannot be above the full price."})
        if replay_file is not None:
            if replay_file not in REPLAY_FILES:
                raise ValidationError({"replay_file": f"Choose one of {', '.join(REPLAY_FILES)}."})
            feed.replay_file = replay_file
        if replay_series_key is not None:
            feed.replay_series = replay_series_key.strip()
        if replay_speedup is not None:
            if isinstance(replay_speedup, bool) or not isinstance(replay_speedup, int) or replay_speedup < 1:
                raise ValidationError({"replay_speedup": "A whole number, 1 or more."})
            feed.replay_speedup = replay_speedup
        if (
            kind == FeedKind.REPLAY
            and replay_series(feed.replay_file, locked.gpu_model, feed.replay_series) is None
        ):
            raise ValidationError(
                {"replay_series": f"spot_history_{feed.replay_file}.csv: no such {locked.gpu_model} series."}
            )
        feed.started_at = timezone.now()
        feed.save()
        log_event(
            locked,
            "spot-feed",
            actor=actor,
            actor_name=actor_name or FEED_ACTOR,
            reason=f"spot feed: {kind}",
            data={
                "kind": kind,
                "min_fraction": str(feed.min_fraction),
                "max_fraction": str(feed.max_fraction),
            },
        )
    return feed


def _fraction(field: str, value) -> Decimal:
    try:
        fraction = Decimal(str(value)) if not isinstance(value, float | bool) else None
    except InvalidOperation:
        fraction = None
    if fraction is None or not fraction.is_finite() or not Decimal(0) < fraction <= 1:
        raise ValidationError({field: "A decimal string above 0 and at most 1, e.g. '0.35'."})
    return fraction.quantize(Decimal("0.0001"))


def advance_spot_feeds(now: dt.datetime | None = None) -> dict[str, str]:
    """Move each occupancy and replay feed's pool to its price at `now` (a new PoolPrice row only when
    the price changed: reruns at the same instant write nothing). Returns what each feed did, by pool."""
    now = now or timezone.now()
    done = {}
    for feed in SpotFeed.objects.select_related("pool").exclude(kind=FeedKind.UPLOAD):
        target, source = _target(feed, now)
        if target is None:
            done[feed.pool.name] = source
        else:
            done[feed.pool.name] = _record(feed.pool, target, now, source)
        SpotFeed.objects.filter(pk=feed.pk).update(last_advanced_at=now, note=done[feed.pool.name][:300])
    return done


def _target(feed: SpotFeed, now: dt.datetime) -> tuple[Decimal | None, str]:
    """The feed's price at `now` and where it comes from (or None and why there is none)."""
    if feed.kind == FeedKind.OCCUPANCY:
        try:
            on_demand = price_in_force(feed.pool.gpu_model, CapacityType.ON_DEMAND, now)
        except NoPriceInForce:
            return None, f"no on-demand price for {feed.pool.gpu_model} to scale from"
        busy = occupancy(feed.pool)
        return occupancy_price(feed, on_demand, busy), f"occupancy feed: {busy:.0%} allocated"
    series = replay_series(feed.replay_file, feed.pool.gpu_model, feed.replay_series)
    if series is None:
        return None, f"no {feed.pool.gpu_model} series in spot_history_{feed.replay_file}.csv"
    price = replay_price(series, feed.started_at, feed.replay_speedup, now)
    return price, f"replay feed: {series.key} x{feed.replay_speedup}"


def _record(pool: Pool, price: Decimal, now: dt.datetime, source: str) -> str:
    """Write the feed's price from `now` under the pool's lock, unless it is already the one in force.
    Not an Event per move: the price history itself records each one, with its source."""
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        try:
            current = price_in_force(locked, locked.capacity_type, now)
        except NoPriceInForce:
            current = None
        if current == price:
            return f"{source}; unchanged at {price}"
        PoolPrice.objects.create(pool=locked, usd_per_gpu_hour=price, effective_from=now, source=source)
    return f"{source}; {current} -> {price}"


def upload_prices(
    text: str, *, actor, pool: Pool | None = None, now: dt.datetime | None = None
) -> list[PoolPrice]:
    """Write an uploaded price file: every row, or nothing (PriceUploadError lists each bad row). The
    pools it prices switch to the upload feed, so the periodic advance leaves their schedule alone."""
    require(can_set_prices(actor), "Only platform operators set prices.")
    now = now or timezone.now()
    rows = parse_price_upload(text, now, pool)
    with transaction.atomic():
        pools = {p.pk: p for p in Pool.objects.select_for_update().filter(pk__in={r.pool.pk for r in rows})}
        created = PoolPrice.objects.bulk_create(
            PoolPrice(
                pool=pools[r.pool.pk],
                usd_per_gpu_hour=r.usd_per_gpu_hour,
                effective_from=r.effective_from,
                source=f"uploaded by {actor.get_username()} (line {r.line})",
                created_by=actor,
            )
            for r in rows
        )
        for locked in pools.values():
            SpotFeed.objects.update_or_create(
                pool=locked, defaults={"kind": FeedKind.UPLOAD, "started_at": now}
            )
            mine = [r for r in rows if r.pool.pk == locked.pk]
            log_event(
                locked,
                "priced",
                actor=actor,
                reason=f"price file uploaded: {len(mine)} price(s)",
                data={"rows": len(mine), "feed": FeedKind.UPLOAD},
            )
    return created
