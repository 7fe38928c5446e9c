"""The comparison: what a request shape costs on-demand and on spot on one GPU model, and the effective
spot cost once expected reclaims are counted.

Reclaim model (documented, first order): reclaims arrive at the spot pool's rate lambda per hour of
running; each one loses the work since the last checkpoint (half the checkpoint interval on average;
the whole run so far when the job does not checkpoint) plus a restart overhead. So each reclaim costs
L = c/2 + r hours, and T hours of work take T_wall = T / (1 - lambda L) hours of paid spot time, with
lambda T_wall reclaims expected. When lambda L >= 1 the work would not finish on spot.

lambda comes from the pool's history (requests moved from running to pending or preempted, per hour
that requests ran on the pool, over RECLAIM_WINDOW) blended with a prior of PRIOR_RECLAIMS per
PRIOR_HOURS (a Gamma prior: with no history the rate is the prior, and history outweighs it as it grows).
"""

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.contrib.contenttypes.models import ContentType
from django.core.cache import cache
from django.utils import timezone

from audit.models import Event
from billing_app.constants import CENT
from billing_app.models import PoolPrice
from billing_app.prices import hourly_usd, share_multiplier
from infra.money import usd
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.models import Allocation, GpuRequest, Pool
from scheduler_app.rules.lifecycle import ACTIVE_STATES

RECLAIM_WINDOW = dt.timedelta(days=30)
# The prior: one reclaim per 24 hours of running (public clouds quote spot interruption rates from
# under 5 % to over 20 % of instances a month; a day is the cautious end for GPU capacity).
PRIOR_RECLAIMS = Decimal(1)
PRIOR_HOURS = Decimal(24)
DEFAULT_RESTART_OVERHEAD_S = 300
RECLAIMED_STATES = (RequestState.PENDING, RequestState.PREEMPTED)
# A requeue's event and the end of the slices it closed are stamped by the same transition.
SAME_MOMENT = dt.timedelta(seconds=60)
HOUR_S = Decimal(3600)
RATE_QUANTUM = Decimal("0.0001")
RECLAIM_RATE_CACHE_S = 300


@dataclass(frozen=True)
class ReclaimRate:
    per_hour: Decimal
    reclaims: int  # seen in the pool's history over the window
    hours_observed: Decimal  # hours requests ran on the pool over the window
    source: str  # "prior" when the pool has no history, else "history + prior"


def reclaim_rate(pool: Pool, now: dt.datetime | None = None) -> ReclaimRate:
    """The pool's reclaims per hour of running, from its last RECLAIM_WINDOW blended with the prior."""
    now = now or timezone.now()
    since = now - RECLAIM_WINDOW
    runs: dict[tuple[int, dt.datetime], dt.datetime | None] = {}
    slices = Allocation.objects.filter(gpu__node__pool=pool, started_at__lt=now).exclude(ended_at__lt=since)
    for request_id, started, ended in slices.values_list("request_id", "started_at", "ended_at"):
        runs[request_id, started] = ended  # one run per request and start, however many cards it held
    seconds = sum(
        ((ended or now) - max(started, since)).total_seconds() for (_, started), ended in runs.items()
    )
    ends: dict[int, list[dt.datetime]] = {}
    for (request_id, _), ended in runs.items():
        if ended is not None and ended >= since:
            ends.setdefault(request_id, []).append(ended)
    events = Event.objects.filter(
        content_type=ContentType.objects.get_for_model(GpuRequest),
        object_id__in=list(ends),
        from_state__in=list(ACTIVE_STATES),
        to_state__in=RECLAIMED_STATES,
        created_at__gte=since - SAME_MOMENT,
    ).values_list("object_id", "created_at")
    reclaims = len({(i, e) for i, at in events for e in ends[i] if abs(at - e) <= SAME_MOMENT})
    hours = (Decimal(seconds) / HOUR_S).quantize(RATE_QUANTUM)
    rate = ((PRIOR_RECLAIMS + reclaims) / (PRIOR_HOURS + hours)).quantize(RATE_QUANTUM)
    return ReclaimRate(rate, reclaims, hours, "history + prior" if runs else "prior")


def cached_reclaim_rate(pool: Pool, at: dt.datetime) -> ReclaimRate:
    """reclaim_rate, kept RECLAIM_RATE_CACHE_S per pool: a 30-day statistic read by every estimate
    (tens of ms on a pool of thousands of cards) need not be recounted each time."""
    key = f"billing:reclaim-rate:{pool.pk}:{int(at.timestamp()) // RECLAIM_RATE_CACHE_S}"
    rate = cache.get(key)
    if rate is None:
        rate = reclaim_rate(pool, at)
        cache.set(key, rate, RECLAIM_RATE_CACHE_S)
    return rate


@dataclass(frozen=True)
class Side:
    """One capacity type's price for the shape: the cheapest priced pool of the model."""

    pool: str
    usd_per_gpu_hour: Decimal
    usd_per_hour: Decimal  # the whole request, cents
    expected_total_usd: Decimal | None  # over the max duration; None without one


@dataclass(frozen=True)
class SpotCost:
    """Spot once reclaims are counted (None totals: no max duration, or it would never finish)."""

    reclaim: ReclaimRate
    loss_per_reclaim_hours: Decimal
    expected_reclaims: Decimal | None
    expected_hours: Decimal | None
    effective_total_usd: Decimal | None
    effective_usd_per_hour: Decimal | None  # per hour of useful work
    note: str


@dataclass(frozen=True)
class Quote:
    gpu_model: str
    gpu_milli: int
    num_gpus: int
    hours: Decimal | None
    on_demand: Side | None
    spot: Side | None
    spot_cost: SpotCost | None

    @property
    def cheaper(self) -> str:
        """Which capacity type costs less once reclaims are counted ("" when it cannot be told)."""
        if self.on_demand is None or self.spot is None or self.spot_cost is None:
            return ""
        spot = self.spot_cost.effective_usd_per_hour
        if spot is None:
            return CapacityType.ON_DEMAND
        return CapacityType.SPOT if spot < self.on_demand.usd_per_hour else CapacityType.ON_DEMAND


def quote(
    *,
    gpu_model: str,
    gpu_milli: int,
    num_gpus: int = 1,
    max_duration_s: int | None = None,
    checkpoint_interval_s: int | None = None,
    restart_overhead_s: int = DEFAULT_RESTART_OVERHEAD_S,
    at: dt.datetime | None = None,
) -> Quote:
    """The comparison for gpu_milli on each of num_gpus cards of gpu_model, at prices in force at `at`."""
    at = at or timezone.now()
    hours = Decimal(max_duration_s) / HOUR_S if max_duration_s else None
    cheapest = _cheapest_pools(gpu_model, at)
    premium = share_multiplier(gpu_milli, at)

    def side(kind: str) -> Side | None:
        row = cheapest.get(kind)
        if row is None:
            return None
        per_hour = hourly_usd(row.usd_per_gpu_hour, gpu_milli, num_gpus, premium)
        total = _cents(per_hour * hours) if hours is not None else None
        return Side(row.pool.name, row.usd_per_gpu_hour, _cents(per_hour), total)

    spot = side(CapacityType.SPOT)
    spot_cost = None
    if spot is not None:
        per_hour = hourly_usd(cheapest[CapacityType.SPOT].usd_per_gpu_hour, gpu_milli, num_gpus, premium)
        rate = cached_reclaim_rate(cheapest[CapacityType.SPOT].pool, at)
        spot_cost = effective_spot_cost(per_hour, rate, hours, checkpoint_interval_s, restart_overhead_s)
    return Quote(gpu_model, gpu_milli, num_gpus, hours, side(CapacityType.ON_DEMAND), spot, spot_cost)


def effective_spot_cost(
    usd_per_hour: Decimal,
    rate: ReclaimRate,
    hours: Decimal | None,
    checkpoint_interval_s: int | None,
    restart_overhead_s: int,
) -> SpotCost:
    """The module's reclaim model applied to one spot price (USD per hour of the whole request)."""
    restart = Decimal(restart_overhead_s) / HOUR_S
    if checkpoint_interval_s:
        lost = Decimal(checkpoint_interval_s) / HOUR_S / 2
        how = f"half the {checkpoint_interval_s} s checkpoint interval"
    elif hours is not None:
        lost = hours / 2
        how = "half the run so far (no checkpoints)"
    else:
        return SpotCost(rate, restart, None, None, None, None, "No checkpoint interval nor max duration.")
    loss = lost + restart
    note = f"each reclaim loses {how} plus {restart_overhead_s} s to restart"
    if rate.per_hour * loss >= 1:
        note = f"Spot would not finish: reclaims come faster than the work between them ({note})."
        return SpotCost(rate, loss.quantize(RATE_QUANTUM), None, None, None, None, note)
    stretch = 1 / (1 - rate.per_hour * loss)
    effective_per_hour = _cents(usd_per_hour * stretch)
    if hours is None:
        return SpotCost(rate, loss.quantize(RATE_QUANTUM), None, None, None, effective_per_hour, note)
    wall = hours * stretch
    return SpotCost(
        rate,
        loss.quantize(RATE_QUANTUM),
        (rate.per_hour * wall).quantize(Decimal("0.01")),
        wall.quantize(RATE_QUANTUM),
        _cents(usd_per_hour * wall),
        effective_per_hour,
        note,
    )


def _cheapest_pools(gpu_model: str, at: dt.datetime) -> dict[str, PoolPrice]:
    rows = PoolPrice.objects.in_force(at).filter(pool__gpu_model=gpu_model).select_related("pool")
    cheapest: dict[str, PoolPrice] = {}
    for row in sorted(rows, key=lambda r: (r.usd_per_gpu_hour, r.pool.name)):
        cheapest.setdefault(row.pool.capacity_type, row)
    return cheapest


def _cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def quote_lines(q: Quote) -> list[str]:
    """The totals and the effective spot cost in words, as the request form shows them."""
    lines = []
    if q.hours is not None and q.on_demand is not None:
        lines.append(f"Over {q.hours.normalize():f} h: on-demand {usd(q.on_demand.expected_total_usd)}")
    cost = q.spot_cost
    unknown = cost is not None and q.hours is None and cost.effective_usd_per_hour is None
    if q.spot is not None and cost is not None and not unknown:  # unknown: neither duration nor checkpoints
        rate = f"{cost.reclaim.per_hour}/h reclaim rate ({cost.reclaim.source})"
        if cost.effective_total_usd is not None:
            lines.append(
                f"Spot {usd(q.spot.expected_total_usd)} nominal, "
                f"{usd(cost.effective_total_usd)} expected with {cost.expected_reclaims} reclaims at {rate}; "
                f"{cost.note}"
            )
        elif cost.effective_usd_per_hour is not None:
            lines.append(
                f"Spot with reclaims counted: {usd(cost.effective_usd_per_hour)}/h at {rate}; {cost.note}"
            )
        else:
            lines.append(f"Spot: {cost.note}")
    return lines
