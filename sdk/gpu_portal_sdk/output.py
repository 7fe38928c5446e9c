"""How the CLI shows things: aligned tables for people, JSON for scripts."""

import dataclasses
import datetime as dt
import json
from decimal import Decimal

from gpu_portal_sdk.models import Estimate, Event, Health, Price, Quote, Resource, Utilization


def to_json(value) -> str:
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    elif isinstance(value, list):
        value = [dataclasses.asdict(v) for v in value]
    return json.dumps(value, indent=2, default=_jsonable)


def _jsonable(value):
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def table(header: list[str], rows: list[list]) -> str:
    cells = [header, *[["-" if c is None or c == "" else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if value else "-"


def clock(value: dt.datetime | None) -> str:
    """'23:01:05' (UTC): a time on a line that follows a request as it goes."""
    return value.astimezone(dt.UTC).strftime("%H:%M:%S") if value else "--:--:--"


def where(resource: Resource) -> str:
    return ", ".join(f"{a.node}/gpu{a.gpu_index}" for a in resource.allocations)


def resources(items: list[Resource]) -> str:
    rows = [
        [
            r.id,
            r.name,
            r.team,
            r.task_type,
            r.share,
            r.billing,
            r.state,
            where(r) or r.pool,
            when(r.created_at),
        ]
        for r in items
    ]
    return table(["ID", "NAME", "TEAM", "TASK", "SHARE", "BILLING", "STATE", "WHERE", "CREATED"], rows)


def summary(r: Resource) -> str:
    line = f"Request {r.id} {r.name!r} ({r.team}): {r.share} {r.task_type}, {r.billing}, {r.state}"
    if r.allocations:
        return f"{line} on {where(r)}"
    if r.pending_reason:
        return f"{line}: {r.pending_reason}"
    return line


def detail(r: Resource) -> str:
    lines = [
        summary(r),
        f"  submitted by {r.user} at {when(r.created_at)}; priority {r.priority}",
        f"  pool {r.pool or 'any'}; GPU model {r.gpu_model or 'any'}; checkpoint every "
        f"{r.checkpoint_interval_s or '-'} s; max duration {r.max_duration_s or '-'} s",
    ]
    if r.estimated_start_at:
        lines.append(f"  estimated start {when(r.estimated_start_at)}")
    if r.command:
        lines.append(f"  command: {r.command}")
    lines += [f"  env {name}={value}" for name, value in r.environment.items()]
    if r.segments:
        rows = [
            [
                f"{a.node}/gpu{a.gpu_index}",
                a.milli,
                a.gpu_memory_mib,
                a.pool,
                a.capacity_type,
                a.billing_mode,
                when(a.started_at),
                when(a.ended_at),
            ]
            for a in r.segments
        ]
        header = ["GPU", "MILLI", "MEMORY_MIB", "POOL", "CAPACITY", "BILLING", "STARTED", "ENDED"]
        lines += ["", table(header, rows)]
    if r.events:
        rows = [[when(e.created_at), e.from_state, e.to_state, e.actor_label, e.reason] for e in r.events]
        lines += ["", table(["AT", "FROM", "TO", "BY", "WHY"], rows)]
    return "\n".join(lines)


def estimate(e: Estimate) -> str:
    if e.starts_now:
        said = f"Would start now on {e.where}."
    else:
        start = f" Estimated start {when(e.estimated_start_at)}." if e.estimated_start_at else ""
        said = f"Would wait: {e.reason}.{start}"
    return f"{said}\n{hourly(e)}"


def hourly(e: Estimate) -> str:
    """'On-demand $1.19/h (a100) · spot $0.33/h (a100-spot), save 72 %'; 'not priced' where no pool is."""
    parts = [
        f"{label} ${quote.usd_per_hour}/h ({quote.pool})" if quote else f"{label} not priced"
        for label, quote in (("On-demand", e.prices.on_demand), ("spot", e.prices.spot))
    ]
    saving = e.prices.spot_saving_percent
    return " · ".join(parts) + (f", save {saving} %" if saving is not None and saving > 0 else "")


def prices(items: list[Price]) -> str:
    rows = [
        [p.pool, p.gpu_model, p.capacity_type, p.usd_per_gpu_hour, when(p.effective_from), p.source]
        for p in items
    ]
    return table(["POOL", "GPU_MODEL", "CAPACITY", "USD_PER_GPU_HOUR", "SINCE", "SOURCE"], rows)


def health(h: Health) -> str:
    verdict = "healthy" if h.healthy else f"not healthy: {h.reason}"
    rows = [
        [
            n.name,
            n.status,
            when(n.last_heartbeat_at),
            "-" if n.heartbeat_age_s is None else f"{n.heartbeat_age_s:.0f}",
        ]
        for n in h.nodes
    ]
    lines = [f"Request {h.request_id} {h.state}: {verdict}"]
    if rows:
        lines.append(table(["NODE", "STATUS", "LAST_HEARTBEAT", "AGE_S"], rows))
    return "\n".join(lines)


def span(seconds: int | None) -> str:
    """'48 s', '15 min', '2.5 h': a duration as people say it."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


# The columns of `gpu-portal utilization`, one row per slice.
UTILIZATION_COLUMNS = [
    "GPU",
    "MILLI",
    "UTIL_%",
    "MEM_MIB",
    "POWER_W",
    "TEMP_C",
    "SAMPLED",
    "MEAN_%",
    "STDDEV_%",
    "SAMPLES",
    "OVER",
    "ENDED",
]


def utilization(u: Utilization) -> str:
    if not u.gpus:
        return f"Request {u.request_id} {u.state}: it has held no GPU yet."
    lines = [
        f"Request {u.request_id} {u.state}: readings over {span(u.window_s)} from {when(u.window_start)} "
        "(each slice's own time, its last 15 minutes at most)"
    ]
    rows = []
    for g in u.gpus:
        latest, summary = g.latest, g.summary
        rows.append(
            [
                f"{g.node}/gpu{g.gpu_index}",
                g.milli,
                latest and latest.gpu_util_percent,
                latest and latest.memory_used_mib,
                latest and f"{latest.power_w:.1f}",
                latest and latest.temperature_c,
                latest and when(latest.sampled_at),
                summary.mean_util_percent,
                summary.util_stddev_percent,
                summary.samples,
                span(g.window_s),
                "held" if g.started_at and not g.ended_at else when(g.ended_at),
            ]
        )
    lines.append(table(UTILIZATION_COLUMNS, rows))
    held = [g for g in u.gpus if g.ended_at is None]
    if not held:
        lines.append("Now: it holds no GPU.")
    elif u.gpu_util is None:
        lines.append(f"Now: no card read in the last {u.current_window_s or 60} s.")
    else:
        lines.append(
            f"Now: util {u.gpu_util:.1f} %, memory {u.mem_util:.1f} % "
            f"(mean of {u.cards_read} of {len(held)} cards over the last {u.current_window_s} s)."
        )
    return "\n".join(lines)


def watched_event(e: Event) -> str:
    """'23:01:05 running -> released by bob: released by user'."""
    change = f"{e.from_state} -> {e.to_state}" if e.from_state else e.to_state
    return f"{clock(e.created_at)} {change} by {e.actor_label}" + (f": {e.reason}" if e.reason else "")


def watched_utilization(u: Utilization, at: dt.datetime) -> str:
    """'23:01:07 util 63.0 %, memory 12.4 % on node-1/gpu0' (the cards it holds, the last minute)."""
    cards = ", ".join(f"{g.node}/gpu{g.gpu_index}" for g in u.gpus if g.ended_at is None)
    if u.gpu_util is None:
        return f"{clock(at)} no reading in the last {u.current_window_s or 60} s on {cards}"
    return f"{clock(at)} util {u.gpu_util:.1f} %, memory {u.mem_util:.1f} % on {cards}"


def quote(q: Quote) -> str:
    """On-demand against spot for a shape: per card-hour, per hour, over the duration, spot with reclaims."""
    hours = f" over {q.hours} h" if q.hours is not None else ""
    lines = [f"{q.gpu_milli} milli-GPU x {q.num_gpus} of {q.gpu_model}{hours}:"]
    effective = q.spot_cost.effective_total_usd if q.spot_cost else None
    rows = [
        [label, side.pool, side.usd_per_gpu_hour, side.usd_per_hour, side.expected_total_usd, extra]
        for label, side, extra in (("on-demand", q.on_demand, None), ("spot", q.spot, effective))
        if side is not None
    ]
    header = ["CAPACITY", "POOL", "USD_PER_GPU_HOUR", "USD_PER_HOUR", "TOTAL_USD", "WITH_RECLAIMS_USD"]
    lines.append(table(header, rows) if rows else "No pool of this model is priced.")
    if q.spot_cost:
        cost = q.spot_cost
        lines.append(f"Spot reclaims: {cost.reclaims_per_hour} an hour ({cost.reclaim_source}).")
        if cost.note:
            lines.append(cost.note)
    if q.cheaper:
        lines.append(f"Cheaper: {q.cheaper}.")
    return "\n".join(lines)


def statement(s) -> str:
    who = f" ({s.user})" if s.user else ""
    lines = [f"{s.team}{who} {s.month}: {s.total_usd} USD, {s.gpu_hours} GPU-hours"]
    for title, rows in (("user", s.by_user), ("pool", s.by_pool), ("billing", s.by_billing_mode)):
        lines += [f"  {title} {name}: {usd} USD" for name, usd in rows.items()]
    return "\n".join(lines)


def reclaimed(node: dict) -> str:
    return f"node {node['name']} is {node['status']}: its jobs checkpoint and move"


def billing(mode: str) -> str:
    return f"billed {mode} from now"
