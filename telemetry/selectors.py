"""Telemetry over a time range for a card, a request (its cards over its life), a team and a pool, at
the resolution the range calls for: raw samples for a short recent range, else 1-minute rollups, else
1-hour rollups (always what retention still holds).

Card readings are the whole card's (NVML reads cards, not slices). A request's series are its cards'
readings while it held them. A team's and a pool's are shares: each card's mean utilization and memory
count towards a team in proportion to the share (milli-GPU) the team held on it in that bucket, so a
team holding half of a card that runs at 80 % is "0.4 GPU busy of 0.5 held"; summed over its cards,
that is the team's `busy_gpus` of `held_gpus`. It is an estimate when tenants of one card differ.

`request_utilization` is a request's recent readings, per segment, raw (the request's utilization API).
"""

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Max, Min, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduler_app.constants import MILLI_PER_GPU, UTILIZATION_MAX_POINTS, UTILIZATION_WINDOW_S
from scheduler_app.models import Allocation, GpuRequest, Pool
from telemetry.models import GpuRollup, GpuSample
from telemetry.rollups import HOUR_S, MINUTE_S
from telemetry.services import Load, Summary, current_load, downsample, summarize
from telemetry.services import Point as SamplePoint

RAW = 1  # a raw sample is its own bucket
RAW_MAX_SPAN_S = 1800  # longer ranges read rollups: at most 1,800 raw points per card
MINUTE_MAX_SPAN_S = 2 * 86400  # at most 2,880 minute points; longer ranges read hours


@dataclass(frozen=True)
class Point:
    """One bucket of a card: mean, population std-dev, min and max util (%), mean and max memory (MiB),
    mean power (W) and temperature (°C) over its `samples`."""

    at: dt.datetime
    samples: int
    util_mean: float
    util_stddev: float
    util_min: int
    util_max: int
    memory_mean_mib: float
    memory_max_mib: int
    power_mean_w: float
    temperature_mean_c: float


@dataclass(frozen=True)
class ShareSeriesPoint:
    """One bucket of a team or a pool: GPUs held and busy (share-weighted), mean util of what was held,
    memory used (share-weighted MiB), and how many cards reported."""

    at: dt.datetime
    cards: int
    held_gpus: float
    busy_gpus: float
    util_percent: float
    memory_used_mib: float


def resolution_for(start: dt.datetime, end: dt.datetime, now: dt.datetime | None = None) -> int:
    """Seconds per bucket for this range: RAW, MINUTE_S or HOUR_S, the finest retention still holds
    whose point count stays readable."""
    now = now or timezone.now()
    span = (end - start).total_seconds()
    age = (now - start).total_seconds()
    if span <= RAW_MAX_SPAN_S and age <= settings.TELEMETRY_RAW_RETENTION_S:
        return RAW
    if span <= MINUTE_MAX_SPAN_S and age <= settings.TELEMETRY_MINUTE_RETENTION_S:
        return MINUTE_S
    return HOUR_S


def card_points(gpu_ids, start: dt.datetime, end: dt.datetime, resolution: int) -> dict[int, list[Point]]:
    """Per card id, its points with `start <= at < end`, in time order (one query)."""
    out: dict[int, list[Point]] = defaultdict(list)
    if resolution == RAW:
        rows = GpuSample.objects.filter(gpu_id__in=gpu_ids, sampled_at__gte=start, sampled_at__lt=end)
        for s in rows.order_by("gpu_id", "sampled_at"):
            out[s.gpu_id].append(
                Point(
                    s.sampled_at,
                    1,
                    float(s.gpu_util_percent),
                    0.0,
                    s.gpu_util_percent,
                    s.gpu_util_percent,
                    float(s.memory_used_mib),
                    s.memory_used_mib,
                    s.power_mw / 1000,
                    float(s.temperature_c),
                )
            )
        return out
    rows = GpuRollup.objects.filter(
        gpu_id__in=gpu_ids, resolution_s=resolution, bucket_start__gte=start, bucket_start__lt=end
    )
    for r in rows.order_by("gpu_id", "bucket_start"):
        mean = r.util_sum / r.samples
        out[r.gpu_id].append(
            Point(
                r.bucket_start,
                r.samples,
                round(mean, 2),
                round(math.sqrt(max(0.0, r.util_sq_sum / r.samples - mean * mean)), 2),
                r.util_min,
                r.util_max,
                round(r.memory_sum / r.samples, 1),
                r.memory_max,
                round(r.power_sum / r.samples / 1000, 2),
                round(r.temperature_sum / r.samples, 1),
            )
        )
    return out


@dataclass(frozen=True)
class SegmentSeries:
    """A request's slice on one card (a segment) and that card's points while the request held it."""

    segment: Allocation
    points: list[Point]


def request_series(
    request: GpuRequest, start: dt.datetime, end: dt.datetime, *, now: dt.datetime | None = None
) -> tuple[int, list[SegmentSeries]]:
    """(resolution, per segment overlapping the range: its card's points within the segment's life)."""
    now = now or timezone.now()
    resolution = resolution_for(start, end, now)
    segments = list(
        _overlapping(Allocation.objects.filter(request=request), start, end)
        .select_related("gpu__node")
        .order_by("started_at", "gpu__node__name", "gpu__index")
    )
    points = card_points({s.gpu_id for s in segments}, start, end, resolution)
    return resolution, [
        SegmentSeries(s, [p for p in points[s.gpu_id] if _held(s, p.at, resolution, now)]) for s in segments
    ]


def latest_card_readings(since: dt.datetime) -> dict[str, Subquery]:
    """The live ticker's reader (scheduler_app.live.readings): annotations of a Gpu queryset, the card's
    newest reading taken at `since` or later, its util (%) and memory used (MiB); None without one. One
    lookup per card on the (gpu, sampled_at) index."""
    fresh = GpuSample.objects.filter(gpu=OuterRef("pk"), sampled_at__gte=since).order_by("-sampled_at")
    return {
        "util": Subquery(fresh.values("gpu_util_percent")[:1]),
        "used_mib": Subquery(fresh.values("memory_used_mib")[:1]),
    }


def request_time_range(request: GpuRequest, *, now: dt.datetime | None = None):
    """(first slice's start, last slice's end, now while one is open): the request's own time range, what
    its telemetry covers by default; None before it held any card."""
    ends = Allocation.objects.filter(request=request).aggregate(
        first=Min("started_at"), last=Max("ended_at"), open=Count("pk", filter=Q(ended_at__isnull=True))
    )
    if ends["first"] is None:
        return None
    end = (now or timezone.now()) if ends["open"] else ends["last"]
    return ends["first"], max(end, ends["first"] + dt.timedelta(seconds=1))  # a range, however short


def team_series(team, start: dt.datetime, end: dt.datetime, *, now: dt.datetime | None = None):
    """(resolution, the team's share-weighted points: its requests' segments overlapping the range)."""
    now = now or timezone.now()
    resolution = max(MINUTE_S, resolution_for(start, end, now))
    segments = list(_overlapping(Allocation.objects.filter(request__team=team), start, end))
    points = card_points({s.gpu_id for s in segments}, start, end, resolution)
    buckets: dict[dt.datetime, list] = defaultdict(lambda: [set(), 0.0, 0.0, 0.0])
    for segment in segments:
        share = segment.milli / MILLI_PER_GPU
        for point in points[segment.gpu_id]:
            if _held(segment, point.at, resolution, now):
                bucket = buckets[point.at]
                bucket[0].add(segment.gpu_id)
                bucket[1] += share
                bucket[2] += share * point.util_mean / 100
                bucket[3] += share * point.memory_mean_mib
    return resolution, [
        ShareSeriesPoint(
            at,
            len(cards),
            round(held, 3),
            round(busy, 3),
            round(busy / held * 100, 1) if held else 0.0,
            round(memory, 1),
        )
        for at, (cards, held, busy, memory) in sorted(buckets.items())
    ]


def pool_series(pool: Pool, start: dt.datetime, end: dt.datetime, *, now: dt.datetime | None = None):
    """(resolution, the pool's points: every card that reported, whoever held it; one aggregate query)."""
    resolution = max(MINUTE_S, resolution_for(start, end, now))
    rows = (
        GpuRollup.objects.filter(
            gpu__node__pool=pool, resolution_s=resolution, bucket_start__gte=start, bucket_start__lt=end
        )
        .values("bucket_start")
        .annotate(cards=Count("gpu_id"), n=Sum("samples"), util=Sum("util_sum"), memory=Sum("memory_sum"))
        .order_by("bucket_start")
    )
    return resolution, [
        ShareSeriesPoint(
            r["bucket_start"],
            r["cards"],
            float(r["cards"]),
            round(r["util"] / r["n"] / 100 * r["cards"], 3),
            round(r["util"] / r["n"], 1),
            round(r["memory"] / r["n"] * r["cards"], 1),
        )
        for r in rows
    ]


def _overlapping(segments, start: dt.datetime, end: dt.datetime):
    return segments.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start), started_at__lt=end)


def _held(segment: Allocation, at: dt.datetime, resolution: int, now: dt.datetime) -> bool:
    """Whether the segment held its card during the bucket starting at `at` (any part of it)."""
    ended = segment.ended_at or now
    return at + dt.timedelta(seconds=resolution) > segment.started_at and at < ended


def gpu_series(gpu_id: int, start: dt.datetime, end: dt.datetime, *, now: dt.datetime | None = None):
    """(resolution, the card's points in the range)."""
    resolution = resolution_for(start, end, now)
    return resolution, card_points([gpu_id], start, end, resolution)[gpu_id]


@dataclass
class CardUtilization:
    """One segment of the request (its slice on one card) and that card's readings within the segment's
    own time range, its last `window_s` seconds at most: from `window_start` to its end (now while open)."""

    segment: Allocation
    window_start: dt.datetime
    window_s: int
    latest: GpuSample | None
    series: list[SamplePoint]
    summary: Summary


@dataclass
class RequestUtilization:
    """The request's segments' readings; `window_start` and `window_s` span their windows together (no
    segment yet: an empty window at `generated_at`)."""

    request: GpuRequest
    generated_at: dt.datetime
    window_start: dt.datetime
    window_s: int
    cards: list[CardUtilization]
    current: Load


def request_utilization(
    request: GpuRequest,
    *,
    now: dt.datetime | None = None,
    window_s: int = UTILIZATION_WINDOW_S,
    max_points: int = UTILIZATION_MAX_POINTS,
) -> RequestUtilization:
    """Per segment of the request (oldest first; a finished request keeps its own): the card's readings in
    the segment's own time range, its last `window_s` seconds at most (never a reading from before the
    slice started or after it ended): the latest, the range downsampled to `max_points`, util mean and
    std-dev; and over the cards it holds now, the current load (the last minute).

    Readings are the whole card's (NVML reads cards, not slices). Three queries whatever the number of
    segments or samples.
    """
    now = now or timezone.now()
    # Open: no upper bound, so a node whose clock runs a little ahead still lands in the last bucket.
    until = Coalesce(OuterRef("ended_at"), Value(now + dt.timedelta(days=1)))
    latest_id = (
        GpuSample.objects.filter(
            gpu=OuterRef("gpu"), sampled_at__gte=OuterRef("started_at"), sampled_at__lte=until
        )
        .order_by("-sampled_at")
        .values("pk")[:1]
    )
    segments = list(
        Allocation.objects.filter(request=request)
        .select_related("gpu__node")
        .annotate(latest_sample_id=Subquery(latest_id))
        .order_by("started_at", "gpu__node__name", "gpu__index", "id")
    )
    windows = {s.pk: _segment_window(s, now, window_s) for s in segments}
    in_window: dict[int, list[GpuSample]] = defaultdict(list)
    if segments:
        ranges = Q()
        for segment in segments:
            begin, end = windows[segment.pk]
            ranges |= Q(gpu_id=segment.gpu_id, sampled_at__gte=begin, **_up_to(segment, end))
        by_card = defaultdict(list)
        for sample in GpuSample.objects.filter(ranges).order_by("gpu_id", "sampled_at"):
            by_card[sample.gpu_id].append(sample)
        for segment in segments:  # a card may hold two segments of one request (a billing switch)
            begin, end = windows[segment.pk]
            in_window[segment.pk] = [
                x
                for x in by_card[segment.gpu_id]
                if x.sampled_at >= begin and (segment.is_open() or x.sampled_at <= end)
            ]
    latest = GpuSample.objects.in_bulk([s.latest_sample_id for s in segments if s.latest_sample_id])
    cards = []
    for segment in segments:
        begin, end = windows[segment.pk]
        span = max(1, round((end - begin).total_seconds()))
        samples = in_window[segment.pk]
        cards.append(
            CardUtilization(
                segment=segment,
                window_start=begin,
                window_s=span,
                latest=latest.get(segment.latest_sample_id),
                series=downsample(samples, start=begin, window_s=span, max_points=max_points),
                summary=summarize(samples),
            )
        )
    held = [(in_window[s.pk], s.gpu.memory_mib) for s in segments if s.is_open()]
    current = current_load(held, now=now)
    if not cards:
        return RequestUtilization(request, now, now, 0, cards, current)
    first = min(c.window_start for c in cards)
    last = max(windows[c.segment.pk][1] for c in cards)
    return RequestUtilization(request, now, first, round((last - first).total_seconds()), cards, current)


def _segment_window(segment: Allocation, now: dt.datetime, window_s: int) -> tuple[dt.datetime, dt.datetime]:
    """(start, end) of what a segment's utilization covers: its last `window_s` seconds, from no earlier
    than its own start, to its end (now while it is open)."""
    end = segment.ended_at or now
    return max(segment.started_at, end - dt.timedelta(seconds=window_s)), end


def _up_to(segment: Allocation, end: dt.datetime) -> dict:
    """The upper bound of a segment's readings: its end; none while open (a clock a little ahead)."""
    return {} if segment.is_open() else {"sampled_at__lte": end}
