"""Where would a request run if submitted now, or when would it start? The next pass's own decision.

The answer comes from the state the last pass left (scheduler_app.passes.stored_state),
with the changes since replayed, and the pass's own queue, placement and
reservation code (scheduler_app.core.next_pass); when no usable state is stored,
from a dry run of a whole pass on a fresh snapshot. Nothing is written.
"""

import dataclasses
import datetime as dt
import threading
from dataclasses import dataclass

from django.utils import timezone

from infra.money import usd
from scheduler_app.core.cluster import RequestSpec
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.next_pass import CandidatePlan, candidate_plan
from scheduler_app.core.placement import DEFAULT_POLICY
from scheduler_app.core.queueing import plan_pass
from scheduler_app.models import Node, Pool
from scheduler_app.passes.cluster_state import (
    WORKLOAD_WINDOW,
    format_utc,
    load_cluster_snapshot,
    request_spec,
)
from scheduler_app.passes.stored_state import next_pass
from scheduler_app.rules.billing import PlacementPrices, billing
from scheduler_app.services.requests import validated_request

# The candidate's id until it is saved; a reason that names its own reservation reads "(12, this request)".
CANDIDATE = "this request"


@dataclass(frozen=True)
class Estimate:
    """starts_now with `where` ("node/gpuN, ..."), or the pending reason and estimated start; the
    pool it would run in ('' when not known yet); the cluster time it was judged on (as_of); prices
    and the quote, as billing gives them (scheduler_app.rules.billing.EstimatePrice)."""

    starts_now: bool
    where: str
    estimated_start_at: dt.datetime | None
    reason: str
    pool: str
    as_of: dt.datetime
    prices: PlacementPrices
    share_label: str
    quote: object | None = None  # on-demand against spot with reclaims counted, on the compared model
    budget_warning: str = ""
    quote_lines: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The sentence the form shows: what the next pass would do, and on which cluster state."""
        basis = (
            f"as the next scheduling pass would place it, using the cluster as of {self.as_of:%H:%M:%S} UTC"
        )
        warning = f" {self.budget_warning}" if self.budget_warning else ""
        if self.starts_now:
            return f"Would start now on {self.where} (pool {self.pool}), {basis}.{warning}"
        return f"Would wait, {basis}: {self.reason}.{warning}"

    @property
    def price_lines(self) -> list[str]:
        """The prices in words, as the form shows them."""
        lines = price_lines(self.prices, self.share_label, self.pool)
        return lines + list(self.quote_lines)


def price_lines(prices: PlacementPrices, label: str, pool: str = "") -> list[str]:
    """The price where the request would run (in `pool`), then on-demand against spot per GPU model."""
    lines = []
    if prices.placed is not None:
        placed = prices.placed
        lines.append(f"For {label} in {placed.pool} ({placed.gpu_model}): {usd(placed.exact_usd_per_hour)}/h")
    elif pool:
        lines.append(f"For {label} in {pool}: not priced yet")
    elif prices.by_model:
        lines.append(f"For {label}, by GPU model:")
    for model in prices.by_model:
        on_demand = f"{usd(model.on_demand.exact_usd_per_hour)}/h" if model.on_demand else "not priced"
        spot = f"{usd(model.spot.exact_usd_per_hour)}/h" if model.spot else "not priced"
        line = f"{model.gpu_model}: on-demand {on_demand} · spot {spot}"
        saving = model.spot_saving_percent
        if saving is not None and saving > 0:
            line += f" (save {saving} %)"
        elif saving is not None:
            line += f" (spot costs {-saving} % more)" if saving < 0 else " (same price)"
        lines.append(line)
    return lines or [f"For {label}: no pool that matches is priced yet."]


# The planned next pass is cached per process and filled lazily; under ASGI each request has a thread
# of its own, so estimates take turns on it (each takes milliseconds).
_NEXT_PASS_LOCK = threading.Lock()


def estimate_request(
    *, user, team, pool_name: str = "", now: dt.datetime | None = None, **fields
) -> Estimate:
    """Validate like a submit (same errors), then ask the next pass's rules where it would go."""
    now = now or timezone.now()
    fields.setdefault("name", "estimate")  # a name does not change where a request runs
    request = validated_request(user=user, team=team, pool_name=pool_name, created_at=now, **fields)
    pools = list(Pool.objects.all())
    spec = dataclasses.replace(request_spec(request, pools), id=CANDIDATE)
    label = request.share_label()

    def answer(starts_now, where, start, reason, pool, as_of, milli=request.gpu_milli) -> Estimate:
        priced = billing().estimate_price(request, placed_pool=pool, gpu_milli=milli, at=now)
        return Estimate(
            starts_now,
            where,
            start,
            reason,
            pool,
            as_of,
            priced.prices,
            label,
            quote=priced.quote,
            budget_warning=priced.budget_warning,
            quote_lines=priced.quote_lines,
        )

    if not spec.pools:
        return answer(False, "", None, f"no {request.billing_mode} pool exists", "", now)
    with _NEXT_PASS_LOCK:
        planned = next_pass()
        if planned is not None:
            decision = planned.place(spec, now.timestamp())
            as_of = dt.datetime.fromtimestamp(planned.state.at, dt.UTC)
    if planned is None:
        decision, as_of = _dry_run(spec, now), now
    pool = _pool_of(decision.node)
    if decision.start is not None:
        placement = decision.start.placement
        where = ", ".join(f"{decision.node}/gpu{i}" for i in placement.gpus)
        if placement.mig:  # a MIG instance is held, and paid for, whole
            where += " MIG " + ", ".join(str(instance) for instance, _ in placement.mig)
            return answer(True, where, now, "", pool, as_of, placement.milli)
        return answer(True, where, now, "", pool, as_of)
    waiting = decision.waiting
    start = (
        None
        if waiting.estimated_start is None
        else dt.datetime.fromtimestamp(waiting.estimated_start, dt.UTC)
    )
    return answer(False, "", start, waiting.reason(format_utc), pool, as_of)


def _dry_run(spec: RequestSpec, now: dt.datetime) -> CandidatePlan:
    """A whole pass planned on a fresh snapshot with the candidate added (slow on a big cluster);
    the candidate counts in the workload mix, as it will once submitted."""
    snapshot = load_cluster_snapshot()
    plan = plan_pass(
        snapshot.nodes,
        [*snapshot.pending, spec],
        snapshot.running,
        snapshot.quotas,
        now.timestamp(),
        DEFAULT_POLICY,
        workload=WorkloadMix.from_requests([spec, *snapshot.recent][:WORKLOAD_WINDOW]),
        offline=snapshot.offline,
    )
    return candidate_plan(plan, CANDIDATE)


def _pool_of(node: str) -> str:
    """The pool of the node the request would run on ('' for none)."""
    if not node:
        return ""
    return Node.objects.filter(name=node).values_list("pool__name", flat=True).first() or ""
