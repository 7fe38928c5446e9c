"""Per-GPU telemetry from node agents: the ingest service, and the pure summaries users read.

Units as NVML gives them: util in whole percent, memory in MiB, power in
milliwatts, temperature in whole °C; times aware UTC.
"""

import datetime as dt
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import NodeStatus
from scheduler_app.constants import (
    CURRENT_LOAD_WINDOW_S,
    MAX_GPUS_PER_SAMPLE_BATCH,
    MAX_POWER_MW,
    MAX_TEMPERATURE_C,
    SAMPLE_MAX_AGE_S,
    SAMPLE_MAX_FUTURE_SKEW_S,
    UTIL_STDDEV_TARGET_PERCENT,
)
from scheduler_app.models import Gpu, GpuSample, Node
from scheduler_app.services.inventory import set_node_status

AGENT = "node agent"
READING_FIELDS = ("uuid", "gpu_util_percent", "memory_used_mib", "power_mw", "temperature_c")


def record_gpu_samples(
    node: Node, sampled_at: dt.datetime, readings: Sequence[Mapping], *, now: dt.datetime | None = None
) -> int:
    """Store one batch of the node's card readings taken at `sampled_at`; returns how many readings.

    Every reading is checked first (a ValidationError naming `gpus[i].field`;
    nothing written). A batch sent again stores nothing new: one row per card and
    sampled_at. The batch is also the node's heartbeat: a suspect node is ready
    again; a lost, draining or reclaimed node keeps its status (an operator decides).
    """
    now = now or timezone.now()
    cards = {gpu.uuid: gpu for gpu in Gpu.objects.filter(node=node)}
    _check_batch(node, sampled_at, readings, cards, now)
    with transaction.atomic():
        GpuSample.objects.bulk_create(
            [
                GpuSample(
                    gpu=cards[reading["uuid"]],
                    sampled_at=sampled_at,
                    gpu_util_percent=reading["gpu_util_percent"],
                    memory_used_mib=reading["memory_used_mib"],
                    power_mw=reading["power_mw"],
                    temperature_c=reading["temperature_c"],
                    received_at=now,
                )
                for reading in readings
            ],
            ignore_conflicts=True,
        )
        record_heartbeat(node, now=now)
    return len(readings)


def record_heartbeat(node: Node, *, now: dt.datetime | None = None) -> Node:
    """The node's agent was heard from now; a suspect node becomes ready again, logged."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        if locked.status == NodeStatus.SUSPECT:
            set_node_status(locked, NodeStatus.READY, actor_name=AGENT, reason="heartbeat resumed")
    node.refresh_from_db()
    return node


def _check_batch(
    node: Node, sampled_at, readings: Sequence[Mapping], cards: dict[str, Gpu], now: dt.datetime
) -> None:
    errors: dict[str, list[str]] = {}
    if problem := sampled_at_error(sampled_at, now):
        errors["sampled_at"] = [problem]
    if len(readings) > MAX_GPUS_PER_SAMPLE_BATCH:
        errors["gpus"] = [f"At most {MAX_GPUS_PER_SAMPLE_BATCH} readings in one batch."]
    seen: set[str] = set()
    for index, reading in enumerate(readings):
        for name, message in _reading_errors(node, reading, cards, seen):
            errors.setdefault(f"gpus[{index}].{name}", []).append(message)
    if errors:
        raise ValidationError(errors)


def sampled_at_error(sampled_at, now: dt.datetime) -> str | None:
    """What is wrong with an agent's reading time, if anything: it must be aware, and neither far in the
    future (a node's clock) nor too old (a replayed backlog)."""
    if not isinstance(sampled_at, dt.datetime) or timezone.is_naive(sampled_at):
        return "Give a time with its timezone (ISO 8601, e.g. 2025-01-31T12:00:00Z)."
    if sampled_at > now + dt.timedelta(seconds=SAMPLE_MAX_FUTURE_SKEW_S):
        return (
            f"{sampled_at.isoformat()} is in the future by more than {SAMPLE_MAX_FUTURE_SKEW_S} s: "
            "check the node's clock."
        )
    if sampled_at < now - dt.timedelta(seconds=SAMPLE_MAX_AGE_S):
        return f"Samples older than {SAMPLE_MAX_AGE_S // 60} minutes are not taken."
    return None


def _reading_errors(node: Node, reading: Mapping, cards: dict[str, Gpu], seen: set[str]):
    """(field, message) for each problem of one reading; `seen` collects the uuids so far."""
    if not isinstance(reading, Mapping):
        yield "uuid", "Give each reading as an object with " + ", ".join(READING_FIELDS) + "."
        return
    for name in READING_FIELDS:
        if name not in reading:
            yield name, "This field is required."
    uuid = reading.get("uuid")
    gpu = cards.get(uuid) if isinstance(uuid, str) else None
    if "uuid" in reading:
        if gpu is None:
            yield "uuid", f"{uuid!r} is not a card of node {node.name}."
        elif uuid in seen:
            yield "uuid", f"{uuid} appears twice in this batch."
        else:
            seen.add(uuid)
    ceilings = {
        "gpu_util_percent": 100,
        "memory_used_mib": gpu.memory_mib if gpu else None,
        "power_mw": MAX_POWER_MW,
        "temperature_c": MAX_TEMPERATURE_C,
    }
    for name, ceiling in ceilings.items():
        if name not in reading:
            continue
        value = reading[name]
        if isinstance(value, bool) or not isinstance(value, int):
            yield name, "Give a whole number."
        elif value < 0 or (ceiling is not None and value > ceiling):
            top = "" if ceiling is None else f" to {ceiling}"
            yield name, f"{value} is out of range: give 0{top}."


@dataclass(frozen=True)
class Point:
    """The mean of a card's samples in one bucket of the window, starting at `at`."""

    at: dt.datetime
    samples: int
    gpu_util_percent: float
    memory_used_mib: int
    power_mw: int
    temperature_c: int


@dataclass(frozen=True)
class Summary:
    """Over the window's raw samples: mean and population std-dev of util (None without samples)."""

    samples: int
    mean_util_percent: float | None
    util_stddev_percent: float | None
    util_stddev_target_percent: int = UTIL_STDDEV_TARGET_PERCENT

    @property
    def util_steady(self) -> bool | None:
        """DESIGN's target signal: util std-dev under 15 % (None without samples)."""
        if self.util_stddev_percent is None:
            return None
        return self.util_stddev_percent < self.util_stddev_target_percent


def downsample(
    samples: Sequence[GpuSample], *, start: dt.datetime, window_s: int, max_points: int
) -> list[Point]:
    """At most `max_points` points: the window cut in equal buckets, one mean point per non-empty bucket.

    `samples` must lie in [start, start + window_s] and be ordered by time.
    """
    bucket_s = window_s / max_points
    buckets: dict[int, list[GpuSample]] = {}
    for sample in samples:
        offset = (sample.sampled_at - start).total_seconds()
        buckets.setdefault(min(max_points - 1, max(0, int(offset // bucket_s))), []).append(sample)
    return [
        Point(
            at=start + dt.timedelta(seconds=index * bucket_s),
            samples=len(group),
            gpu_util_percent=round(statistics.fmean(s.gpu_util_percent for s in group), 1),
            memory_used_mib=round(statistics.fmean(s.memory_used_mib for s in group)),
            power_mw=round(statistics.fmean(s.power_mw for s in group)),
            temperature_c=round(statistics.fmean(s.temperature_c for s in group)),
        )
        for index, group in sorted(buckets.items())
    ]


def summarize(samples: Sequence[GpuSample]) -> Summary:
    if not samples:
        return Summary(samples=0, mean_util_percent=None, util_stddev_percent=None)
    utils = [s.gpu_util_percent for s in samples]
    return Summary(
        samples=len(utils),
        mean_util_percent=round(statistics.fmean(utils), 1),
        util_stddev_percent=round(statistics.pstdev(utils), 1),
    )


@dataclass(frozen=True)
class Load:
    """How busy a request's cards are now: over the cards read in the last `window_s` seconds, the
    mean util and the mean memory used as % of each card's memory (None when no card was read)."""

    window_s: int
    cards_read: int
    gpu_util_percent: float | None
    mem_util_percent: float | None


def current_load(
    cards: Sequence[tuple[Sequence[GpuSample], int]],
    *,
    now: dt.datetime,
    window_s: int = CURRENT_LOAD_WINDOW_S,
) -> Load:
    """`cards` pairs each card's recent samples with its memory in MiB. Each card counts once (the
    mean of its own readings in the window), so a card that reports more often does not weigh more."""
    since = now - dt.timedelta(seconds=window_s)
    utils, mems = [], []
    for samples, memory_mib in cards:
        recent = [s for s in samples if s.sampled_at >= since]
        if recent:
            utils.append(statistics.fmean(s.gpu_util_percent for s in recent))
            mems.append(100 * statistics.fmean(s.memory_used_mib for s in recent) / memory_mib)
    if not utils:
        return Load(window_s, 0, None, None)
    return Load(window_s, len(utils), round(statistics.fmean(utils), 1), round(statistics.fmean(mems), 1))
