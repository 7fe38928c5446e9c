"""What the portal answers, as frozen dataclasses. Unknown fields from a newer portal are ignored;
fields an older portal lacks take their defaults. Shares are in milli-GPU (1000 = one card)."""

import dataclasses
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Self

PLACED_STATES = frozenset({"scheduled", "running"})
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "preempted", "released"})


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


_TIME = dt.datetime | None


def _known(cls, data: dict, **converted) -> dict:
    """The fields of dataclass `cls` found in `data`, its times (fields typed `dt.datetime | None`) parsed,
    then `converted` over them."""
    fields = dataclasses.fields(cls)
    known = {f.name: data[f.name] for f in fields if f.name in data}
    return known | {f.name: parse_time(data.get(f.name)) for f in fields if f.type == _TIME} | converted


class _FromApi:
    """from_api for an answer of plain fields and times."""

    @classmethod
    def from_api(cls, data: dict) -> Self:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Allocation(_FromApi):
    """One slice of one card that a request holds (a segment): `milli` of GPU `gpu_index` on `node`."""

    id: int
    node: str
    gpu_index: int
    gpu_uuid: str
    milli: int
    gpu_memory_mib: int
    billing_mode: str
    borrowed: bool = False
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    pool: str = ""
    capacity_type: str = ""  # what the slice runs on (spot, on-demand); billing_mode is what it is billed as
    node_status: str = ""
    node_last_heartbeat_at: dt.datetime | None = None


@dataclass(frozen=True)
class Event(_FromApi):
    """One state change in a request's timeline."""

    created_at: dt.datetime | None
    actor_label: str
    from_state: str
    to_state: str
    reason: str


@dataclass(frozen=True)
class Resource:
    """A GPU request and what it holds. `allocations` are the open slices (where it runs now);
    `segments` (every slice it ever held) and `events` come only from `get()`."""

    id: int
    name: str
    team: str
    state: str
    share: str
    gpu_milli: int
    num_gpus: int
    task_type: str = "training"
    user: str = ""
    pool: str | None = None
    gpu_model: str = ""
    gpu_memory_mib: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    billing_mode: str = "on-demand"
    # The capacity type that runs the work (ran it, once ended), None before it ran; billing_label says
    # both where they differ: "spot (running on on-demand: fallback)".
    capacity_type: str | None = None
    billing_label: str = ""
    allow_on_demand_fallback: bool = False
    checkpoint_interval_s: int | None = None
    pinned: bool = False
    priority: int = 0
    max_duration_s: int | None = None
    command: str = ""
    environment: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)  # NAME -> value
    pending_reason: str = ""
    estimated_start_at: dt.datetime | None = None
    created_at: dt.datetime | None = None
    scheduled_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    allocations: tuple[Allocation, ...] = ()
    segments: tuple[Allocation, ...] | None = None
    events: tuple[Event, ...] | None = None

    @property
    def resource_id(self) -> int:
        """The request's id, what get_utilization(), check_health() and release() take (same as `id`)."""
        return self.id

    @property
    def billing(self) -> str:
        """The billing mode with the capacity that runs the work where it differs (the billing mode alone
        from a portal that does not say)."""
        return self.billing_label or self.billing_mode

    @property
    def is_placed(self) -> bool:
        """Scheduled or running: the capacity is reserved for it."""
        return self.state in PLACED_STATES

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_api(cls, data: dict) -> "Resource":
        converted = {"allocations": tuple(Allocation.from_api(a) for a in data.get("allocations", ()))}
        if "segments" in data:
            converted["segments"] = tuple(Allocation.from_api(a) for a in data["segments"])
        if "events" in data:
            converted["events"] = tuple(Event.from_api(e) for e in data["events"])
        return cls(**_known(cls, data, **converted))


@dataclass(frozen=True)
class LogTail(_FromApi):
    """A piece of a request's log (its job's output as the node's agent shipped it): `text` from character
    offset `start` to `end` (ask for what follows with after=end), and the request's `state` and
    `exit_code` as they were when it was read."""

    start: int
    end: int
    text: str
    state: str
    exit_code: int | None = None

    @property
    def ended(self) -> bool:
        """The request has ended: once a read after that brings no text, the log is complete."""
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class HourlyPrice:
    """What the request would cost per hour in `pool`, in US dollars rounded to cents (a Decimal)."""

    usd_per_hour: Decimal
    pool: str
    gpu_model: str = ""

    @classmethod
    def from_api(cls, data: dict | None) -> "HourlyPrice | None":
        if data is None:
            return None
        return cls(**_known(cls, data, usd_per_hour=Decimal(str(data["usd_per_hour"]))))


@dataclass(frozen=True)
class EstimatePrices:
    """The request's price per hour on-demand and on spot, each in the cheapest matching priced pool;
    None where no such pool is priced."""

    on_demand: HourlyPrice | None = None
    spot: HourlyPrice | None = None
    spot_saving_percent: int | None = None

    @classmethod
    def from_api(cls, data: dict | None) -> "EstimatePrices":
        data = data or {}
        return cls(
            **_known(
                cls,
                data,
                on_demand=HourlyPrice.from_api(data.get("on_demand")),
                spot=HourlyPrice.from_api(data.get("spot")),
            )
        )


def _decimal(value) -> Decimal | None:
    return None if value is None else Decimal(str(value))


@dataclass(frozen=True)
class QuoteSide:
    """One capacity type for the shape, in the cheapest priced pool of the model: USD per card-hour,
    per hour for the whole request, and over the max duration (None without one)."""

    pool: str
    usd_per_gpu_hour: Decimal
    usd_per_hour: Decimal
    expected_total_usd: Decimal | None = None

    @classmethod
    def from_api(cls, data: dict | None) -> "QuoteSide | None":
        if data is None:
            return None
        money = {k: _decimal(data.get(k)) for k in ("usd_per_gpu_hour", "usd_per_hour", "expected_total_usd")}
        return cls(**_known(cls, data, **money))


@dataclass(frozen=True)
class SpotCost:
    """Spot once expected reclaims are counted: the pool's reclaim rate per hour (and whether it comes
    from history or the prior), the reclaims and paid hours expected, and the effective cost."""

    reclaims_per_hour: Decimal
    reclaim_source: str
    expected_reclaims: Decimal | None
    expected_hours: Decimal | None
    effective_total_usd: Decimal | None
    effective_usd_per_hour: Decimal | None
    note: str = ""

    @classmethod
    def from_api(cls, data: dict | None) -> "SpotCost | None":
        if data is None:
            return None
        keys = ("expected_reclaims", "expected_hours", "effective_total_usd", "effective_usd_per_hour")
        return cls(
            reclaims_per_hour=Decimal(str(data["reclaim"]["per_hour"])),
            reclaim_source=data["reclaim"]["source"],
            note=data.get("note", ""),
            **{k: _decimal(data.get(k)) for k in keys},
        )


@dataclass(frozen=True)
class Quote:
    """On-demand against spot for one request shape on one GPU model (see ResourceManager.quote)."""

    gpu_model: str
    gpu_milli: int
    num_gpus: int
    hours: Decimal | None = None
    on_demand: QuoteSide | None = None
    spot: QuoteSide | None = None
    spot_cost: SpotCost | None = None
    cheaper: str = ""

    @classmethod
    def from_api(cls, data: dict | None) -> "Quote | None":
        if data is None:
            return None
        return cls(
            **_known(
                cls,
                data,
                hours=_decimal(data.get("hours")),
                on_demand=QuoteSide.from_api(data.get("on_demand")),
                spot=QuoteSide.from_api(data.get("spot")),
                spot_cost=SpotCost.from_api(data.get("spot_cost")),
            )
        )


@dataclass(frozen=True)
class Estimate:
    """Where a request would run if submitted now (`where`, "node/gpuN, ..."), or why it would wait;
    and what it would cost per hour (`prices`)."""

    starts_now: bool
    where: str
    estimated_start_at: dt.datetime | None
    reason: str
    prices: EstimatePrices = EstimatePrices()
    quote: Quote | None = None

    @classmethod
    def from_api(cls, data: dict) -> "Estimate":
        return cls(
            **_known(
                cls,
                data,
                prices=EstimatePrices.from_api(data.get("prices")),
                quote=Quote.from_api(data.get("quote")),
            )
        )


@dataclass(frozen=True)
class NodeHealth:
    """A node the request runs on: its status as the portal sees it, and the age of its last heartbeat
    measured against the portal's clock (None when the node never sent one)."""

    name: str
    status: str
    last_heartbeat_at: dt.datetime | None
    heartbeat_age_s: float | None
    heartbeating: bool

    @property
    def ready(self) -> bool:
        return self.status == "ready"


@dataclass(frozen=True)
class Health:
    """A request's state and its nodes. `healthy` when placed and every node it runs on is ready and its
    agent sent a heartbeat within `max_heartbeat_age_s`; otherwise `reason` says why not ("" if healthy)."""

    request_id: int
    state: str
    nodes: tuple[NodeHealth, ...]
    max_heartbeat_age_s: float
    healthy: bool
    reason: str

    @property
    def placed(self) -> bool:
        return self.state in PLACED_STATES

    @classmethod
    def judge(cls, request_id: int, state: str, nodes: tuple[NodeHealth, ...], max_heartbeat_age_s: float):
        problems = []
        if state not in PLACED_STATES:
            problems.append(f"the request is {state}, not placed on a GPU")
        elif not nodes:
            problems.append(f"the request is {state} but holds no GPU")
        for node in nodes:
            if not node.ready:
                problems.append(f"node {node.name} is {node.status}")
            elif node.heartbeat_age_s is None:
                problems.append(f"node {node.name}: no heartbeat from its agent yet")
            elif not node.heartbeating:
                problems.append(
                    f"node {node.name}: last heartbeat {node.heartbeat_age_s:.0f} s ago "
                    f"(more than {max_heartbeat_age_s:g} s)"
                )
        return cls(request_id, state, nodes, max_heartbeat_age_s, not problems, "; ".join(problems))


@dataclass(frozen=True)
class Price:
    """The price in force of one whole card of `pool` for an hour, in US dollars (a Decimal, never a
    float), since `effective_from`; `source` says where the number comes from."""

    gpu_model: str
    capacity_type: str
    usd_per_gpu_hour: Decimal
    pool: str = ""
    effective_from: dt.datetime | None = None
    source: str = ""

    @classmethod
    def from_api(cls, data: dict) -> "Price":
        return cls(
            **_known(
                cls,
                data,
                usd_per_gpu_hour=Decimal(str(data["usd_per_gpu_hour"])),
            )
        )


@dataclass(frozen=True)
class GpuSample(_FromApi):
    """One reading of a whole card by its node's agent: util in %, memory in MiB, power in milliwatts,
    temperature in °C (NVML's units)."""

    sampled_at: dt.datetime | None
    gpu_util_percent: int
    memory_used_mib: int
    power_mw: int
    temperature_c: int

    @property
    def power_w(self) -> float:
        return self.power_mw / 1000


@dataclass(frozen=True)
class UtilizationPoint(_FromApi):
    """The mean of a card's `samples` readings in one bucket of the window, starting at `at`."""

    at: dt.datetime | None
    samples: int
    gpu_util_percent: float
    memory_used_mib: int
    power_mw: int
    temperature_c: int


@dataclass(frozen=True)
class UtilizationSummary(_FromApi):
    """Over the window's readings: mean util and its population std-dev, in % (None without readings).
    `util_steady`: the std-dev is under the portal's target (15 %)."""

    samples: int
    mean_util_percent: float | None = None
    util_stddev_percent: float | None = None
    util_stddev_target_percent: int = 15
    util_steady: bool | None = None


@dataclass(frozen=True)
class GpuUtilization:
    """One slice of the request (`milli` of a card, from `started_at` to `ended_at`, None while held) and
    that card's readings within the slice's own time: the latest (None if the agent never reported then),
    its last `window_s` seconds from `window_start` (15 minutes at most) as at most 60 points, and the
    summary. Readings are the whole card's, every slice on it included."""

    node: str
    gpu_index: int
    gpu_uuid: str
    milli: int
    latest: GpuSample | None
    series: tuple[UtilizationPoint, ...]
    summary: UtilizationSummary
    memory_mib: int | None = None  # the card's memory (None from an older portal)
    allocation: int | None = None  # the segment's id
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    window_start: dt.datetime | None = None
    window_s: int | None = None

    @classmethod
    def from_api(cls, data: dict) -> "GpuUtilization":
        latest = data.get("latest")
        return cls(
            **_known(
                cls,
                data,
                latest=GpuSample.from_api(latest) if latest else None,
                series=tuple(UtilizationPoint.from_api(p) for p in data.get("series", ())),
                summary=UtilizationSummary.from_api(data.get("summary") or {"samples": 0}),
            )
        )


@dataclass(frozen=True)
class Utilization:
    """A request's slices (`gpus`), each with its card's readings in the slice's own time; together they
    span `window_s` seconds from `window_start` (`generated_at` is the portal's clock).

    `gpu_util` and `mem_util`: how busy the request is now, in %: over its cards read in the last
    `current_window_s` seconds (`cards_read` of them), the mean util and the mean memory used as a
    share of each card's memory; None when no card was read then (no agent reporting)."""

    request_id: int
    state: str
    generated_at: dt.datetime | None
    window_start: dt.datetime | None
    window_s: int
    gpus: tuple[GpuUtilization, ...]
    gpu_util: float | None = None
    mem_util: float | None = None
    cards_read: int = 0
    current_window_s: int | None = None

    @classmethod
    def from_api(cls, data: dict) -> "Utilization":
        current = data.get("current") or {}
        return cls(
            **_known(
                cls,
                data,
                gpus=tuple(GpuUtilization.from_api(g) for g in data.get("gpus", ())),
                gpu_util=current.get("gpu_util_percent"),
                mem_util=current.get("mem_util_percent"),
                cards_read=current.get("cards_read", 0),
                current_window_s=current.get("window_s"),
            )
        )


@dataclass(frozen=True)
class Team(_FromApi):
    """A team you belong to and your role in it."""

    slug: str
    name: str
    role: str


@dataclass(frozen=True)
class RecommendedOption:
    """One way to run a job: a share (`gpu_milli` per card on `num_gpus` cards) on a capacity type, its
    predicted runtime in seconds with its band, and its predicted cost in USD (Decimal)."""

    gpu_milli: int
    num_gpus: int
    capacity_type: str
    runtime_s: float
    runtime_high_s: float
    runtime_low_s: float
    cost_usd: Decimal
    cost_high_usd: Decimal
    pareto: bool = False

    @classmethod
    def from_api(cls, data: dict | None) -> "RecommendedOption | None":
        if data is None:
            return None
        money = {k: Decimal(str(data[k])) for k in ("cost_usd", "cost_high_usd")}
        return cls(**_known(cls, data, **money))


@dataclass(frozen=True)
class Recommendation:
    """The time/cost options of a request shape and the cheapest meeting the deadline and budget
    (`chosen`, None when none does: `reason` says why); `source` says what T(f) was learnt from."""

    gpu_model: str
    chosen: RecommendedOption | None
    reason: str
    options: list[RecommendedOption]
    source: str
    predictions: list[dict]

    @classmethod
    def from_api(cls, data: dict) -> "Recommendation":
        return cls(
            gpu_model=data["gpu_model"],
            chosen=RecommendedOption.from_api(data["chosen"]),
            reason=data["reason"],
            options=[RecommendedOption.from_api(o) for o in data["options"]],
            source=data["curve"]["source"],
            predictions=data["predictions"],
        )

    @property
    def pareto(self) -> list[RecommendedOption]:
        """The options no other beats on both time and cost."""
        return [o for o in self.options if o.pareto]


@dataclass(frozen=True)
class Statement:
    """A team's (or one member's, `user`) month: total USD (Decimal) and GPU-hours, with the USD by user,
    by pool and by billing mode as {name: Decimal}."""

    team: str
    month: str
    total_usd: Decimal
    gpu_hours: Decimal
    user: str = ""
    by_user: dict = dataclasses.field(default_factory=dict)
    by_pool: dict = dataclasses.field(default_factory=dict)
    by_billing_mode: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_api(cls, data: dict) -> "Statement":
        def rows(key, label):
            return {row[label]: Decimal(row["usd"]) for row in data.get(key, [])}

        return cls(
            **_known(
                cls,
                data,
                total_usd=Decimal(data["total_usd"]),
                gpu_hours=Decimal(data["gpu_hours"]),
                by_user=rows("by_user", "user"),
                by_pool=rows("by_pool", "pool"),
                by_billing_mode=rows("by_billing_mode", "billing_mode"),
            )
        )
