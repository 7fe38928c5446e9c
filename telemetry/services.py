"""Telemetry from node agents: the ingest services (card readings, and a host's and its jobs' own use), and
the pure summaries users read.

Units as NVML gives them: util in whole percent, memory in MiB, power in
milliwatts, temperature in whole °C; times aware UTC.
"""

import datetime as dt
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from scheduler_app.choices import NodeStatus
from scheduler_app.constants import (
    CURRENT_LOAD_WINDOW_S,
    MAX_GPUS_PER_SAMPLE_BATCH,
    MAX_MOMENTS_PER_SAMPLE_BATCH,
    MAX_NETWORK_BYTES_PER_S,
    MAX_POWER_MW,
    MAX_TEMPERATURE_C,
    SAMPLE_MAX_AGE_S,
    SAMPLE_MAX_FUTURE_SKEW_S,
    UTIL_STDDEV_TARGET_PERCENT,
)
from scheduler_app.models import Allocation, Gpu, Node
from scheduler_app.services.inventory import record_heartbeat
from telemetry.models import AllocationSample, GpuSample, NodeSample

READING_FIELDS = ("uuid", "gpu_util_percent", "memory_used_mib", "power_mw", "temperature_c")


@dataclass(frozen=True)
class SampleMoment:
    """What a node's agent read at one moment: its cards' readings and, if read, the node's network
    throughput in bytes/s (received + sent)."""

    sampled_at: dt.datetime
    readings: Sequence[Mapping]
    network_bytes_per_s: int | None = None


def record_gpu_samples(
    node: Node,
    sampled_at: dt.datetime,
    readings: Sequence[Mapping],
    *,
    now: dt.datetime | None = None,
    network_bytes_per_s: int | None = None,
) -> int:
    """Store one batch of the node's card readings taken at `sampled_at`; returns how many readings.

    Every reading is checked first (a ValidationError naming `gpus[i].field`;
    nothing written). A batch sent again stores nothing new: one row per card and
    sampled_at. The batch is also the node's heartbeat: a suspect node is ready
    again; a lost, draining or reclaimed node keeps its status (an operator decides).
    """
    return record_sample_moments(node, [SampleMoment(sampled_at, readings, network_bytes_per_s)], now=now)


def record_sample_moments(
    node: Node, moments: Sequence[SampleMoment], *, now: dt.datetime | None = None
) -> int:
    """Store several moments' readings of one node at once (an agent catching up, or batching to save
    requests); returns how many card readings. Checked whole first (errors named `gpus[i].field` for
    one moment, `moments[j].gpus[i].field` for several; nothing written), one row per card and time."""
    now = now or timezone.now()
    # On PostgreSQL the node's cards come from this process's cache first: the store statement
    # refuses to write when the cards a batch names are no longer as cached, and a batch the cache
    # finds wrong is judged again on fresh cards, so the cache never decides alone.
    trust_cache = connection.vendor == "postgresql"
    for _ in range(2):
        cards = _cards(node, fresh=not trust_cache)
        errors = _batch_errors(node, moments, cards, now)
        if errors and trust_cache:
            cards = _cards(node, fresh=True)
            errors = _batch_errors(node, moments, cards, now)
        if errors:
            raise ValidationError(errors)
        rows = [
            (
                cards[r["uuid"]][0],
                m.sampled_at,
                r["gpu_util_percent"],
                r["memory_used_mib"],
                r["power_mw"],
                r["temperature_c"],
            )
            for m in moments
            for r in m.readings
        ]
        node_rows = [
            (m.sampled_at, m.network_bytes_per_s) for m in moments if m.network_bytes_per_s is not None
        ]
        if connection.vendor != "postgresql":
            with transaction.atomic():
                _store(node, rows, node_rows, now)
                record_heartbeat(node, now=now)
            return len(rows)
        named = {r["uuid"] for m in moments for r in m.readings}
        stored, beaten = _store_in_one_statement(node, rows, node_rows, now, {u: cards[u] for u in named})
        if stored:
            if beaten:
                node.last_heartbeat_at = now
            else:
                record_heartbeat(node, now=now)
            return len(rows)
        trust_cache = False  # the node's cards changed since they were cached: again, on fresh ones
    raise ValidationError({"gpus": ["The node's cards changed while this batch was stored; send it again."]})


# Per node id: {uuid: (card id, memory MiB)} as last read from the database (see record_sample_moments).
_known_cards: dict[int, dict[str, tuple[int, int]]] = {}


def _cards(node: Node, *, fresh: bool) -> dict[str, tuple[int, int]]:
    if not fresh and (known := _known_cards.get(node.pk)) is not None:
        return known
    cards = {
        uuid: (pk, memory)
        for pk, uuid, memory in Gpu.objects.filter(node=node).values_list("pk", "uuid", "memory_mib")
    }
    _known_cards[node.pk] = cards
    return cards


def _batch_errors(
    node: Node, moments: Sequence[SampleMoment], cards, now: dt.datetime
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if len(moments) > MAX_MOMENTS_PER_SAMPLE_BATCH:
        errors["moments"] = [f"At most {MAX_MOMENTS_PER_SAMPLE_BATCH} moments in one batch."]
    for index, moment in enumerate(moments):
        place = "" if len(moments) == 1 else f"moments[{index}]."
        for name, messages in _moment_errors(node, moment, cards, now).items():
            errors.setdefault(place + name, []).extend(messages)
    if len({m.sampled_at for m in moments}) < len(moments):
        errors.setdefault("moments", []).append("Each moment's sampled_at appears once in a batch.")
    return errors


# PostgreSQL: one statement, so one round trip and one transaction. It writes nothing unless the cards
# the batch names are still the node's with the memory the checks used (`fresh`); then the card rows
# (ON CONFLICT: a resent batch adds nothing), the node's readings and the heartbeat of a node that is
# not suspect (a suspect one comes back through record_heartbeat, which logs it). It answers (written,
# beat). Arrays through unnest: one statement whatever the batch's size (measured faster than COPY,
# which also cannot skip rows already stored: bench/README.md).
_STORE_SQL = f"""
WITH fresh AS (
    SELECT count(*) = %(named)s AS ok
    FROM unnest(%(card_id)s::bigint[], %(card_uuid)s::text[], %(card_memory)s::int[]) AS c(id, uuid, memory)
    JOIN {Gpu._meta.db_table} g ON g.id = c.id AND g.uuid = c.uuid AND g.memory_mib = c.memory
        AND g.node_id = %(node)s
), beat AS (
    UPDATE {Node._meta.db_table} SET last_heartbeat_at = %(now)s
    WHERE id = %(node)s AND status <> %(suspect)s AND (SELECT ok FROM fresh) RETURNING id
), node_rows AS (
    INSERT INTO {NodeSample._meta.db_table} (node_id, sampled_at, network_bytes_per_s, received_at)
    SELECT %(node)s, at, bps, %(now)s
    FROM unnest(%(node_at)s::timestamptz[], %(node_bps)s::bigint[]) AS r(at, bps)
    WHERE (SELECT ok FROM fresh)
    ON CONFLICT DO NOTHING
), card_rows AS (
    INSERT INTO {GpuSample._meta.db_table}
        (gpu_id, sampled_at, gpu_util_percent, memory_used_mib, power_mw, temperature_c, received_at)
    SELECT gpu, at, util, memory, power, temperature, %(now)s
    FROM unnest(
        %(gpu)s::bigint[], %(at)s::timestamptz[], %(util)s::int[], %(memory)s::int[], %(power)s::int[],
        %(temperature)s::int[]
    ) AS r(gpu, at, util, memory, power, temperature)
    WHERE (SELECT ok FROM fresh)
    ON CONFLICT DO NOTHING
)
SELECT (SELECT ok FROM fresh), (SELECT count(*) FROM beat)
"""


def _store_in_one_statement(
    node: Node, rows: list[tuple], node_rows: list[tuple], now: dt.datetime, named: dict[str, tuple[int, int]]
) -> tuple[bool, bool]:
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(_COLUMNS)
    params = {
        "now": now,
        "node": node.pk,
        "suspect": NodeStatus.SUSPECT,
        "named": len(named),
        "card_uuid": list(named),
        "card_id": [pk for pk, _ in named.values()],
        "card_memory": [memory for _, memory in named.values()],
        "node_at": [at for at, _ in node_rows],
        "node_bps": [bps for _, bps in node_rows],
        **{name: list(values) for name, values in zip(_COLUMNS, columns, strict=True)},
    }
    with connection.cursor() as cursor:
        # Sent as one query string: PostgreSQL runs it as one transaction, so the SET LOCAL holds for
        # the insert. Readings are cheap to lose and costly to wait for: a crash may drop the last
        # fraction of a second of committed samples (never corrupt them); the commit does not wait
        # for the disk.
        cursor.execute("SET LOCAL synchronous_commit TO OFF; " + _STORE_SQL, params)
        cursor.cursor.nextset()
        written, beats = cursor.fetchone()
        return written, beats == 1


_COLUMNS = ("gpu", "at", "util", "memory", "power", "temperature")


def _store(node: Node, rows: list[tuple], node_rows: list[tuple], now: dt.datetime) -> None:
    GpuSample.objects.bulk_create(
        [
            GpuSample(
                gpu_id=gpu_id,
                sampled_at=at,
                gpu_util_percent=util,
                memory_used_mib=memory,
                power_mw=power,
                temperature_c=temperature,
                received_at=now,
            )
            for gpu_id, at, util, memory, power, temperature in rows
        ],
        ignore_conflicts=True,
    )
    if node_rows:
        NodeSample.objects.bulk_create(
            [
                NodeSample(node=node, sampled_at=at, network_bytes_per_s=bps, received_at=now)
                for at, bps in node_rows
            ],
            ignore_conflicts=True,
        )


def _moment_errors(node: Node, moment: SampleMoment, cards: dict[str, tuple[int, int]], now: dt.datetime):
    """{field: [message]} for one moment (empty when it is good)."""
    errors: dict[str, list[str]] = {}
    sampled_at, readings = moment.sampled_at, moment.readings
    if problem := sampled_at_error(sampled_at, now):
        errors["sampled_at"] = [problem]
    network = moment.network_bytes_per_s
    if network is not None and (isinstance(network, bool) or not isinstance(network, int)):
        errors["network_bytes_per_s"] = ["Give a whole number of bytes per second."]
    elif network is not None and not 0 <= network <= MAX_NETWORK_BYTES_PER_S:
        errors["network_bytes_per_s"] = [f"{network} is out of range: give 0 to {MAX_NETWORK_BYTES_PER_S}."]
    if len(readings) > MAX_GPUS_PER_SAMPLE_BATCH:
        errors["gpus"] = [f"At most {MAX_GPUS_PER_SAMPLE_BATCH} readings in one batch."]
    seen: set[str] = set()
    for index, reading in enumerate(readings):
        for name, message in _reading_errors(node, reading, cards, seen):
            errors.setdefault(f"gpus[{index}].{name}", []).append(message)
    return errors


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


def _reading_errors(node: Node, reading: Mapping, cards: dict[str, tuple[int, int]], seen: set[str]):
    """(field, message) for each problem of one reading; `seen` collects the uuids so far."""
    if not isinstance(reading, Mapping):
        yield "uuid", "Give each reading as an object with " + ", ".join(READING_FIELDS) + "."
        return
    for name in READING_FIELDS:
        if name not in reading:
            yield name, "This field is required."
    uuid = reading.get("uuid")
    card = cards.get(uuid) if isinstance(uuid, str) else None
    if "uuid" in reading:
        if card is None:
            yield "uuid", f"{uuid!r} is not a card of node {node.name}."
        elif uuid in seen:
            yield "uuid", f"{uuid} appears twice in this batch."
        else:
            seen.add(uuid)
    ceilings = {
        "gpu_util_percent": 100,
        "memory_used_mib": card[1] if card else None,
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


def record_usage(
    node: Node,
    sampled_at: dt.datetime,
    *,
    host: Mapping,
    slices: Sequence[Mapping],
    now: dt.datetime | None = None,
) -> int:
    """Store what the agent read at `sampled_at`: the host's CPU and network (`host`: cpu_percent,
    net_rx_bytes_per_s, net_tx_bytes_per_s) and each running job's own use of its cards (`slices`:
    request_id, uuid, memory_used_mib, sm_util_percent). Also a heartbeat; returns the slices stored.

    Each slice must be an open one of this node (a ValidationError naming `slices[i]`; nothing
    written). Sent again, a reading is stored once.
    """
    now = now or timezone.now()
    errors: dict[str, list[str]] = {}
    if problem := sampled_at_error(sampled_at, now):
        errors["sampled_at"] = [problem]
    open_here = {
        (a.request_id, a.gpu.uuid): a
        for a in Allocation.objects.committed().filter(gpu__node=node).select_related("gpu")
    }
    for index, reading in enumerate(slices):
        if (reading["request_id"], reading["uuid"]) not in open_here:
            errors[f"slices[{index}]"] = [
                f"Request {reading['request_id']} holds no open slice of {reading['uuid']} on {node.name}."
            ]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        NodeSample.objects.bulk_create(
            [
                NodeSample(
                    node=node,
                    sampled_at=sampled_at,
                    received_at=now,
                    network_bytes_per_s=host["net_rx_bytes_per_s"] + host["net_tx_bytes_per_s"],
                    **host,
                )
            ],
            ignore_conflicts=True,
        )
        AllocationSample.objects.bulk_create(
            [
                AllocationSample(
                    allocation=open_here[(r["request_id"], r["uuid"])],
                    sampled_at=sampled_at,
                    memory_used_mib=r["memory_used_mib"],
                    sm_util_percent=r["sm_util_percent"],
                    received_at=now,
                )
                for r in slices
            ],
            ignore_conflicts=True,
        )
        record_heartbeat(node, now=now)
    return len(slices)


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
