"""Where would a request run if submitted now, or when would it start? A dry run of the scheduler."""

import dataclasses
import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from billing_app.selectors import HourlyPrices, price_per_hour
from scheduler_app.cluster_state import load_cluster_snapshot, request_spec
from scheduler_app.core.placement import DEFAULT_POLICY
from scheduler_app.core.queueing import plan_pass
from scheduler_app.models import Pool
from scheduler_app.scheduling import format_utc
from scheduler_app.services import validated_request

CANDIDATE = "candidate"


@dataclass(frozen=True)
class Estimate:
    """starts_now with `where` ("node/gpuN, ..."), or the pending reason and estimated start; and
    the price per hour (USD) of the share on-demand and on spot, in the cheapest matching pools."""

    starts_now: bool
    where: str
    estimated_start_at: dt.datetime | None
    reason: str
    prices: HourlyPrices


def estimate_request(
    *, user, team, pool_name: str = "", now: dt.datetime | None = None, **fields
) -> Estimate:
    """Validate like a submit (same errors), then plan one pass with the request added; writes nothing."""
    now = now or timezone.now()
    request = validated_request(user=user, team=team, pool_name=pool_name, created_at=now, **fields)
    prices = price_per_hour(
        request.gpu_milli, request.num_gpus, gpu_model=request.gpu_model or None, pool=request.pool, at=now
    )
    spec = dataclasses.replace(request_spec(request, list(Pool.objects.all())), id=CANDIDATE)
    if not spec.pools:
        return Estimate(False, "", None, f"no {request.billing_mode} pool exists", prices)
    snapshot = load_cluster_snapshot()
    plan = plan_pass(
        snapshot.nodes,
        [*snapshot.pending, spec],
        snapshot.running,
        snapshot.quotas,
        now.timestamp(),
        DEFAULT_POLICY,
        workload=snapshot.workload,
    )
    for start in plan.starts:
        if start.request.id == CANDIDATE:
            where = ", ".join(f"{start.placement.node}/gpu{i}" for i in start.placement.gpus)
            return Estimate(True, where, now, "", prices)
    waiting = next(w for w in plan.waiting if w.request_id == CANDIDATE)
    estimate = (
        None
        if waiting.estimated_start is None
        else dt.datetime.fromtimestamp(waiting.estimated_start, dt.UTC)
    )
    return Estimate(False, "", estimate, waiting.reason(clock=format_utc), prices)
