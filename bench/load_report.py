"""What bench.load reads back from the database after a run, and which of its targets failed.

The capacity counts are DESIGN's invariants as scheduler_app.rules.invariants states them (the same
queries the test suite runs after every test); only `open_connections` is PostgreSQL-only.
"""

import datetime as dt
import statistics

from django.db import connection
from django.db.models import Count

from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.rules.invariants import over_committed_gpus, slices_of_inactive_requests

# A pending request must have a reason (or be placed) within this many scheduling passes.
PASSES_BEFORE_REASON = 2
# Counts that must be zero for the run to pass; the exit code is non-zero when one is not.
COUNT_TARGETS = (
    "server_errors",
    "transport_errors",
    "open_slices_of_inactive_requests",
    "gpus_over_capacity",
    "pending_without_reason",
)
SUBMITS_PER_S_TARGET = 150.0
P95_SUBMIT_MS_TARGET = 250.0


def pending_without_reason(now: dt.datetime, interval_s: int) -> int:
    """Pending requests with an empty pending_reason submitted more than PASSES_BEFORE_REASON
    periodic passes ago (interval_s = SCHEDULER_INTERVAL_S, beat's period): by then at least two
    passes have looked at them, and each pass either places a request or says why it waits."""
    cutoff = now - dt.timedelta(seconds=PASSES_BEFORE_REASON * interval_s)
    waiting = GpuRequest.objects.filter(state=RequestState.PENDING, pending_reason="")
    return waiting.filter(created_at__lt=cutoff).count()


def requests_by_state() -> dict[str, int]:
    counts = dict.fromkeys(RequestState.values, 0)
    for row in GpuRequest.objects.values("state").annotate(n=Count("id")).order_by():
        counts[row["state"]] = row["n"]
    return counts


def open_connections(database: str) -> int:
    """Sessions on `database` other than this one (PostgreSQL's pg_stat_activity)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select count(*) from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
            [database],
        )
        return cursor.fetchone()[0]


def backend_cpu(database: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving `database` (not this one), by pid."""
    from bench.cpu_usage import cpu_seconds

    with connection.cursor() as cursor:
        cursor.execute(
            "select pid from pg_stat_activity where datname = %s and pid <> pg_backend_pid()", [database]
        )
        return {pid: cpu_seconds(pid) for (pid,) in cursor.fetchall()}


def invariants(now: dt.datetime, interval_s: int) -> dict[str, int]:
    return {
        "open_slices_of_inactive_requests": len(slices_of_inactive_requests()),
        "gpus_over_capacity": len(over_committed_gpus()),
        "pending_without_reason": pending_without_reason(now, interval_s),
    }


def latency_ms(samples_s: list[float]) -> dict[str, float | None]:
    """p50 and p95 in milliseconds, interpolated between samples; None without samples."""
    if not samples_s:
        return {"p50": None, "p95": None}
    ordered = sorted(samples_s)
    if len(ordered) == 1:
        return {"p50": ordered[0] * 1000, "p95": ordered[0] * 1000}
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": cuts[49] * 1000, "p95": cuts[94] * 1000}


def failed_targets(result: dict) -> tuple[list[str], list[str]]:
    """(count targets that failed: exit non-zero; speed targets missed: reported only)."""
    counts = [f"{name} = {result[name]} (target 0)" for name in COUNT_TARGETS if result[name]]
    speed = []
    if result["submits_per_s"] < SUBMITS_PER_S_TARGET:
        speed.append(f"submits/s {result['submits_per_s']:.1f} (target >= {SUBMITS_PER_S_TARGET:.0f})")
    p95 = result["submit_latency_ms"]["p95"]
    if p95 is None or p95 >= P95_SUBMIT_MS_TARGET:
        speed.append(f"submit p95 {p95} ms (target < {P95_SUBMIT_MS_TARGET:.0f} ms)")
    return counts, speed
