"""The cost/performance model: a job's runtime as a function of its GPU share, T(f), and the option
that meets a deadline or a budget at least cost. Pure Python + numpy: no ORM, no clock.

The model (a roofline with a host part), for a share f of one card (0 < f ≤ 1) or n whole cards:

    T(f) = T1 · (a + (1 - a) · g(f)),   g(f) = max(1, s / f) for f ≤ 1,   g(n) = 1 / n for n whole cards

- T1: the runtime on one whole card, in seconds;
- a:  the part of the time that no GPU share changes (input pipeline, host code, I/O), 0..1;
- s:  the share at which the GPU part saturates (it cannot use more of one card), 0..1.

Below s the GPU part runs at f / s of its full speed; above it, it does not speed up. On n whole cards
the GPU part is split n ways (Amdahl). Why this family: it is the smallest one with a saturation point
(a job that keeps 30 % of a card busy loses little at 0.5) and a part that never scales; fitted to the
field data (1.0 → 0.75: 15 % slower, 0.5: 60 % slower) it gives a = 0.25, s = 0.9 exactly, and the
backtest in `bench/perf_model.py` checks it against true curves of other shapes (smooth compute-bound,
memory-bound and input-bound curves), which it was not tuned on.

Parameters are fitted per workload by least squares on the relative error of its finished runs,
regularised towards a prior (the task type's, moved by the measured utilization), so one or two runs
give a sensible curve and many runs override the prior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from scheduler_app.constants import MILLI_PER_GPU

CENT = Decimal("0.01")

# Grid of the fit: a in steps of 0.01, s in steps of 0.01 (from 0.05: a job needs some GPU).
_A_GRID = np.linspace(0.0, 1.0, 101)
_S_GRID = np.linspace(0.05, 1.0, 96)

# Relative half-width of the uncertainty band, by the best source the curve came from.
BAND_HISTORY = 0.05
BAND_UTILIZATION = 0.15
BAND_PRIOR = 0.30
# How sure a prior is, as the standard deviation of each parameter (weights of the regularisation).
_PRIOR_SD = 0.15
_UTIL_SD = 0.07
# A share whose work keeps it busier than this is starved: it would run faster with more.
STARVED_BUSY = 0.9


@dataclass(frozen=True)
class Prior:
    """What a task type's jobs look like before anything is known of this one."""

    a: float
    s: float


PRIORS = {
    # The field training job's own fit (a = 0.25, s = 0.9) is the training prior.
    "training": Prior(a=0.25, s=0.9),
    # Inference serves small batches: more host time and a lower saturation point.
    "inference": Prior(a=0.4, s=0.5),
}
DEFAULT_PRIOR = PRIORS["training"]


@dataclass(frozen=True)
class Run:
    """A finished run of the workload: its share (milli per card, and cards) and its runtime in seconds."""

    gpu_milli: int
    num_gpus: int
    runtime_s: float

    @property
    def share(self) -> float:
        return share_of(self.gpu_milli, self.num_gpus)


@dataclass(frozen=True)
class Utilization:
    """A measured utilization: the share held (milli per card) and how busy the job kept it (0..1 of
    that share, e.g. 0.6 = 60 % of the held share)."""

    gpu_milli: int
    busy: float


@dataclass(frozen=True)
class Curve:
    """A fitted T(f): parameters, where they came from, and the relative half-width of the band."""

    t1_s: float
    a: float
    s: float
    source: str  # "history", "utilization" or "prior"
    band: float
    observed_shares: tuple[float, ...] = ()

    def runtime(self, share: float) -> float:
        """Predicted runtime in seconds at this share (a fraction of one card, or whole cards ≥ 1)."""
        return self.t1_s * slowdown(share, self.a, self.s)

    def band_at(self, share: float) -> float:
        """Relative half-width of the band at `share`: the source's, widened by how far (in log share)
        the share lies from the nearest observed one."""
        if not self.observed_shares:
            return self.band
        distance = min(abs(math.log(share / seen)) for seen in self.observed_shares)
        return self.band + 0.1 * distance

    def point(self, share: float) -> Prediction:
        runtime = self.runtime(share)
        width = self.band_at(share)
        return Prediction(share, runtime, runtime * (1 - width), runtime * (1 + width))


@dataclass(frozen=True)
class Prediction:
    """Predicted runtime at a share with its band, in seconds."""

    share: float
    runtime_s: float
    low_s: float
    high_s: float


def share_of(gpu_milli: int, num_gpus: int = 1) -> float:
    """The share as a number of cards: 0.125 .. 1, or whole cards."""
    return gpu_milli * num_gpus / MILLI_PER_GPU


def slowdown(share: float, a: float, s: float) -> float:
    """T(f) / T1 for the model's parameters (see the module's docstring)."""
    if share > 1:
        return a + (1 - a) / share
    return a + (1 - a) * max(1.0, s / share)


def _slowdowns(shares: np.ndarray) -> np.ndarray:
    """T(f)/T1 for every (a, s) of the grid and every share: shape (len(a), len(s), len(shares))."""
    a = _A_GRID[:, None, None]
    s = _S_GRID[None, :, None]
    f = shares[None, None, :]
    g = np.where(f > 1, 1 / f, np.maximum(1.0, s / f))
    return a + (1 - a) * g


def prior_for(task_type: str, utilization: Utilization | None = None) -> tuple[Prior, bool]:
    """The task type's prior, moved by a measured utilization; and whether that measurement says the
    job is starved (busy near all of its share, so it would use more).

    A job that keeps `busy` of a share f busy uses d = busy · f of a card; its GPU part (1 - a of its
    time) then runs at d / (1 - a) of a card, which is the saturation point s, unless it is starved
    at f (then s is at least f)."""
    prior = PRIORS.get(task_type, DEFAULT_PRIOR)
    if utilization is None:
        return prior, False
    held = utilization.gpu_milli / MILLI_PER_GPU
    busy = min(max(utilization.busy, 0.0), 1.0)
    if busy >= STARVED_BUSY:
        return Prior(prior.a, max(prior.s, min(1.0, held / (1 - prior.a) * busy))), held < 1
    demand = busy * held
    return Prior(prior.a, min(1.0, max(0.05, demand / (1 - prior.a)))), False


def fit(
    runs: list[Run],
    *,
    task_type: str = "training",
    utilization: Utilization | None = None,
    t1_hint_s: float | None = None,
) -> Curve:
    """Fit T(f) to a workload's finished runs (least squares on the relative error), regularised
    towards the prior; with no runs, the prior's shape scaled to `t1_hint_s` (e.g. the max duration)."""
    prior, _ = prior_for(task_type, utilization)
    sd_s = _UTIL_SD if utilization is not None else _PRIOR_SD
    source = "utilization" if utilization is not None else "prior"
    if not runs:
        t1 = float(t1_hint_s or 3600.0)
        band = BAND_UTILIZATION if utilization is not None else BAND_PRIOR
        return Curve(t1, prior.a, prior.s, source, band)
    shares = np.array([r.share for r in runs], dtype=float)
    times = np.array([r.runtime_s for r in runs], dtype=float)
    r = _slowdowns(shares)
    # For fixed (a, s) the best T1 under relative error is closed-form: T1 = Σ(r/T) / Σ(r/T)².
    x = r / times
    t1 = x.sum(axis=2) / (x**2).sum(axis=2)
    residual = ((t1[:, :, None] * x - 1) ** 2).sum(axis=2)
    penalty = ((_A_GRID[:, None] - prior.a) / _PRIOR_SD) ** 2 + ((_S_GRID[None, :] - prior.s) / sd_s) ** 2
    # The prior weighs like a small fraction of one run's 10 % error, so data dominates where it exists.
    objective = residual + 1e-3 * penalty
    i, j = np.unravel_index(np.argmin(objective), objective.shape)
    distinct = sorted({round(float(f), 4) for f in shares})
    rms = float(np.sqrt(residual[i, j] / len(runs)))
    if len(distinct) >= 2:
        band = max(BAND_HISTORY, 2 * rms)
    else:
        band = max(BAND_UTILIZATION if utilization is not None else BAND_PRIOR, 2 * rms)
    return Curve(
        float(t1[i, j]),
        float(_A_GRID[i]),
        float(_S_GRID[j]),
        "history" if len(distinct) >= 2 else source,
        band,
        tuple(distinct),
    )


# --- recommendation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One way to run the job: a share on a capacity type of a GPU model, its predicted time (with band)
    and cost."""

    gpu_milli: int
    num_gpus: int
    capacity_type: str  # "on-demand" or "spot"
    runtime_s: float
    runtime_high_s: float
    runtime_low_s: float
    cost_usd: Decimal
    cost_high_usd: Decimal
    pareto: bool = False
    gpu_model: str = ""

    @property
    def share(self) -> float:
        return share_of(self.gpu_milli, self.num_gpus)


@dataclass(frozen=True)
class Recommendation:
    """Every option, and the cheapest that meets the deadline (its band's upper end within it) and the
    budget (its cost at that upper end within it); `chosen` is None when none does, with the reason."""

    curve: Curve
    options: tuple[Option, ...]
    chosen: Option | None
    reason: str
    fastest: Option | None = None
    cheapest: Option | None = None
    shares: tuple[Prediction, ...] = field(default_factory=tuple)


def candidate_shapes(granularity_milli: int = 125, max_gpus: int = 8) -> list[tuple[int, int]]:
    """(gpu_milli, num_gpus) from one granule to a whole card, then 2, 4, 8 ... whole cards."""
    shapes = [(milli, 1) for milli in range(granularity_milli, MILLI_PER_GPU + 1, granularity_milli)]
    if shapes[-1] != (MILLI_PER_GPU, 1):
        shapes.append((MILLI_PER_GPU, 1))
    n = 2
    while n <= max_gpus:
        shapes.append((MILLI_PER_GPU, n))
        n *= 2
    return shapes


def _cost(usd_per_gpu_hour: Decimal, share: float, seconds: float) -> Decimal:
    """USD for `share` cards over `seconds` at the per-GPU-hour price, rounded half-up to cents."""
    gpu_seconds = Decimal(str(round(share * seconds, 3)))
    return (usd_per_gpu_hour * gpu_seconds / Decimal(3600)).quantize(CENT, rounding=ROUND_HALF_UP)


def pareto_front(options: list[Option]) -> set[int]:
    """Indices of the options no other beats on both predicted time and cost (ties keep both)."""
    front = set()
    for i, o in enumerate(options):
        dominated = any(
            (p.runtime_s <= o.runtime_s and p.cost_usd <= o.cost_usd)
            and (p.runtime_s < o.runtime_s or p.cost_usd < o.cost_usd)
            for p in options
        )
        if not dominated:
            front.add(i)
    return front


def price_options(
    curve: Curve,
    prices: Mapping[str, Decimal],
    *,
    gpu_model: str = "",
    shapes: list[tuple[int, int]] | None = None,
    spot_time_factor: float = 1.0,
) -> list[Option]:
    """Every shape on every priced capacity type of one GPU model (`prices`: USD per GPU-hour by
    "on-demand" / "spot"). `spot_time_factor` stretches spot runtimes for the work expected to be lost
    to reclaims (1.0: none)."""
    options: list[Option] = []
    for milli, gpus in shapes or candidate_shapes():
        point = curve.point(share_of(milli, gpus))
        for kind, price in sorted(prices.items()):
            stretch = spot_time_factor if kind == "spot" else 1.0
            runtime, high, low = point.runtime_s * stretch, point.high_s * stretch, point.low_s * stretch
            share = share_of(milli, gpus)
            options.append(
                Option(
                    milli,
                    gpus,
                    kind,
                    runtime,
                    high,
                    low,
                    _cost(price, share, runtime),
                    _cost(price, share, high),
                    gpu_model=gpu_model,
                )
            )
    return options


def choose(
    curve: Curve,
    options: list[Option],
    *,
    deadline_s: float | None = None,
    budget_usd: Decimal | None = None,
    shapes: list[tuple[int, int]] | None = None,
) -> Recommendation:
    """Mark the Pareto front of `options` (of one GPU model or several) and choose the cheapest whose
    upper band meets the deadline and budget; ties go to the faster one."""
    front = pareto_front(options)
    options = [
        Option(**{**o.__dict__, "pareto": i in front})  # frozen: rebuild with the flag
        for i, o in enumerate(options)
    ]
    meeting = [
        o
        for o in options
        if (deadline_s is None or o.runtime_high_s <= deadline_s)
        and (budget_usd is None or o.cost_high_usd <= budget_usd)
    ]
    fastest = min(options, key=lambda o: (o.runtime_s, o.cost_usd), default=None)
    cheapest = min(options, key=lambda o: (o.cost_usd, o.runtime_s), default=None)
    if not options:
        chosen, reason = None, "No priced capacity for this GPU model."
    elif meeting:
        chosen = min(meeting, key=lambda o: (o.cost_usd, o.runtime_s))
        several_models = len({o.gpu_model for o in options}) > 1
        reason = _why(chosen, deadline_s, budget_usd, name_the_model=several_models)
    else:
        chosen, reason = None, _why_none(deadline_s, budget_usd)
    grid = tuple(curve.point(share_of(m, g)) for m, g in shapes or candidate_shapes())
    return Recommendation(curve, tuple(options), chosen, reason, fastest, cheapest, grid)


def recommend(
    curve: Curve,
    prices: Mapping[str, Decimal],
    *,
    deadline_s: float | None = None,
    budget_usd: Decimal | None = None,
    shapes: list[tuple[int, int]] | None = None,
    spot_time_factor: float = 1.0,
) -> Recommendation:
    """The options of one GPU model (price_options) and the choice among them (choose)."""
    options = price_options(curve, prices, shapes=shapes, spot_time_factor=spot_time_factor)
    return choose(curve, options, deadline_s=deadline_s, budget_usd=budget_usd, shapes=shapes)


def _why(chosen: Option, deadline_s: float | None, budget_usd: Decimal | None, name_the_model: bool) -> str:
    kind = "spot" if chosen.capacity_type == "spot" else "on-demand"
    if name_the_model:
        kind = f"{kind} {chosen.gpu_model}"
    shape = (
        f"{chosen.num_gpus} cards"
        if chosen.num_gpus > 1
        else f"{chosen.gpu_milli / MILLI_PER_GPU:g} of a card"
    )
    limits = []
    if deadline_s is not None:
        limits.append("the deadline")
    if budget_usd is not None:
        limits.append("the budget")
    meets = f", meeting {' and '.join(limits)} even at the slow end of its band" if limits else ""
    return f"{shape} on {kind} costs least (about ${chosen.cost_usd}){meets}."


def _why_none(deadline_s: float | None, budget_usd: Decimal | None) -> str:
    if deadline_s is not None and budget_usd is not None:
        return "No option meets both the deadline and the budget; the fastest and the cheapest are shown."
    if deadline_s is not None:
        return "No option meets the deadline, even on the most cards; the fastest is shown."
    return "No option fits the budget; the cheapest is shown."


# --- adaptive adjustment --------------------------------------------------------------------------


@dataclass(frozen=True)
class Resize:
    """A resize to offer a running job: the share it would move to, and the predicted effect."""

    from_milli: int
    to_milli: int
    slowdown_percent: int  # predicted runtime change, + slower / - faster
    saving_percent: int  # cost change per unit of work, + cheaper
    reason: str


def suggest_resize(
    gpu_milli: int,
    busy: float,
    task_type: str = "training",
    *,
    granularity_milli: int = 125,
    max_slowdown=0.05,
) -> Resize | None:
    """For a running single-card job that keeps `busy` (0..1) of its share busy: the smallest share it
    would lose at most `max_slowdown` of its speed at (when cheaper), or, when starved, the next share up.
    None when staying put is best."""
    utilization = Utilization(gpu_milli, busy)
    prior, starved = prior_for(task_type, utilization)
    here = share_of(gpu_milli)
    now = slowdown(here, prior.a, prior.s)
    if starved:
        if gpu_milli >= MILLI_PER_GPU:
            return None
        up = min(MILLI_PER_GPU, gpu_milli + granularity_milli)
        faster = slowdown(share_of(up), prior.a, prior.s) / now - 1
        return Resize(
            gpu_milli,
            up,
            round(100 * faster),
            round(100 * (1 - (1 + faster) * up / gpu_milli)),
            f"Busy {busy:.0%} of its share: it is starved and would run faster with more.",
        )
    for milli in range(granularity_milli, gpu_milli, granularity_milli):
        slower = slowdown(share_of(milli), prior.a, prior.s) / now - 1
        if slower <= max_slowdown:
            saving = 1 - (1 + slower) * milli / gpu_milli
            return Resize(
                gpu_milli,
                milli,
                round(100 * slower),
                round(100 * saving),
                f"Busy {busy:.0%} of its share: {milli / MILLI_PER_GPU:g} of a card would cost "
                f"{round(100 * saving)} % less for about {round(100 * slower)} % more time.",
            )
    return None
