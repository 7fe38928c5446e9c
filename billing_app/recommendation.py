"""What the cost/performance model needs from the database, and its answer for a request shape.

Reads only: the workload's finished runs (same team, same workload key), its measured utilization,
and the prices in force (through `model_prices`, the one place that asks the price catalog)."""

import datetime as dt
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from billing_app.performance import Curve, Recommendation, Run, Utilization, choose, fit, price_options
from billing_app.selectors import price_per_hour
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.models import GpuRequest
from telemetry.selectors import request_series

HISTORY_RUNS = 50  # the newest finished runs of a workload that the fit reads
UTILIZATION_RUNS = 3  # the newest runs of a workload whose readings are looked for


def workload_of(workload_key: str, command: str, name: str = "") -> str:
    """The workload a request belongs to: the key its user set, else its command with whitespace
    normalised, else its name."""
    return workload_key.strip() or " ".join(command.split()) or " ".join(name.split())


def _of_workload(requests, key: str):
    """Narrow `requests` in the database to those that may be of the workload (`workload_of` decides)."""
    first_word = key.split()[0]
    return requests.filter(
        Q(workload_key=key)
        | Q(workload_key="", command__contains=first_word)
        | Q(workload_key="", command="", name__contains=first_word)
    )


def workload_runs(team, key: str) -> list[Run]:
    """The team's succeeded runs of this workload (newest first), with their runtime in seconds (from
    start to end: time spent requeued after a reclaim counts, as it does for the user)."""
    if not key:
        return []
    rows = (
        _of_workload(GpuRequest.objects.filter(team=team, state=RequestState.SUCCEEDED), key)
        .filter(started_at__isnull=False, ended_at__isnull=False)
        .only("command", "workload_key", "name", "gpu_milli", "num_gpus", "started_at", "ended_at")
        .order_by("-ended_at")[: HISTORY_RUNS * 4]
    )
    runs = [
        Run(r.gpu_milli, r.num_gpus, (r.ended_at - r.started_at).total_seconds())
        for r in rows
        if workload_of(r.workload_key, r.command, r.name) == key and r.ended_at > r.started_at
    ]
    return runs[:HISTORY_RUNS]


def measured_utilization(request: GpuRequest, now: dt.datetime | None = None) -> Utilization | None:
    """How busy the request kept its share over the last hour it ran (up to now): the mean util of its
    card, 0..1; None when there are no readings or it spans cards."""
    if request.started_at is None or request.num_gpus != 1:
        return None
    now = now or timezone.now()
    end = request.ended_at or now
    start = max(request.started_at, end - dt.timedelta(hours=1))
    _, series = request_series(request, start, end, now=now)
    points = [p for s in series for p in s.points]
    samples = sum(p.samples for p in points)
    if not samples:
        return None
    util = sum(p.util_mean * p.samples for p in points) / samples / 100
    # The card's util counts as the share's (half a card at 80 % is 0.4 busy of 0.5 held), as the
    # telemetry does. On a shared card a neighbour's load shows too (see resizing: no "starved" offer there).
    return Utilization(request.gpu_milli, min(1.0, util))


def latest_utilization(team, key: str) -> Utilization | None:
    """The measured utilization of the workload's newest single-card run with readings."""
    if not key:
        return None
    candidates = _of_workload(GpuRequest.objects.filter(team=team, num_gpus=1, started_at__isnull=False), key)
    matching = [
        r
        for r in candidates.order_by("-started_at")[:50]
        if workload_of(r.workload_key, r.command, r.name) == key
    ]
    for request in matching[:UTILIZATION_RUNS]:  # two queries each: a few at most
        measured = measured_utilization(request)
        if measured is not None:
            return measured
    return None


def model_prices(
    gpu_milli: int, num_gpus: int, gpu_model: str = "", pool=None
) -> dict[str, dict[str, Decimal]]:
    """USD per whole GPU-hour by GPU model, then capacity type, for each model the shape may run on (the
    one asked for, the pool's, or every priced one): the cheapest priced pool of each kind, as the
    price catalog compares them."""
    by_model = price_per_hour(gpu_milli, num_gpus, gpu_model=gpu_model or None, pool=pool).by_model
    return {
        compared.gpu_model: {
            side.value: price.usd_per_gpu_hour
            for side, price in (
                (CapacityType.ON_DEMAND, compared.on_demand),
                (CapacityType.SPOT, compared.spot),
            )
            if price is not None
        }
        for compared in by_model
    }


def workload_curve(team, key: str, task_type: str, max_duration_s: int | None) -> Curve:
    """T(f) for the team's workload: from its runs, else its utilization, else the task type's prior
    (scaled to the max duration, else an hour)."""
    return fit(
        workload_runs(team, key),
        task_type=task_type,
        utilization=latest_utilization(team, key),
        t1_hint_s=max_duration_s,
    )


def recommend_for(
    *,
    team,
    task_type: str,
    gpu_milli: int,
    num_gpus: int = 1,
    command: str = "",
    name: str = "",
    workload_key: str = "",
    gpu_model: str = "",
    pool=None,
    max_duration_s: int | None = None,
    deadline_s: int | None = None,
    budget_usd: Decimal | None = None,
) -> tuple[str, Recommendation]:
    """The time/cost options of a request shape on each GPU model it may run on, and the cheapest meeting
    the deadline and budget; with the model compared ('' when several are: each option names its own).
    The curve is the workload's on any model: the history does not tell the models apart."""
    key = workload_of(workload_key, command, name)
    curve = workload_curve(team, key, task_type, max_duration_s)
    by_model = model_prices(gpu_milli, num_gpus, gpu_model, pool)
    options = [
        option
        for model, prices in by_model.items()
        for option in price_options(curve, prices, gpu_model=model)
    ]
    compared = next(iter(by_model)) if len(by_model) == 1 else gpu_model
    return compared, choose(curve, options, deadline_s=deadline_s, budget_usd=budget_usd)
