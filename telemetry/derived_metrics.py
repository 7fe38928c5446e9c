"""Checks on running work's telemetry, each finding a notice to the team (once per episode) and an Event:

- unsteady utilization: a card's util standard deviation over the last UTILIZATION_WINDOW_S above 15 %;
- a memory leak: a card's GPU memory grew more than 5 % over (up to) the last 24 hours of the request;
- idle work, by its team's idle policy (telemetry.idle): batch work noticed (and released under the
  policy), interactive work warned and then stopped;
- a slow network: a node running work averaged under TELEMETRY_NETWORK_FLOOR_BYTES_PER_S.

Card readings are the whole card's (NVML reads cards, not slices): on a shared card a neighbour's load
shows in every tenant's figures. That makes idle detection conservative (a busy neighbour keeps a card
from looking idle), which is the safe side for releasing work. All figures come from the 1-minute
rollups (node throughput from the raw node samples), one aggregate query per check.
"""

import datetime as dt
import math
from collections import Counter, defaultdict

from django.conf import settings
from django.db.models import Count, F, Sum, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from audit.choices import NoticeKind
from audit.notices import Finding, raise_notices, request_notice_key
from scheduler_app.constants import UTIL_STDDEV_TARGET_PERCENT, UTILIZATION_WINDOW_S
from scheduler_app.models import GpuRequest, Node
from telemetry.idle import act_on_idle, idle_findings, idle_work
from telemetry.models import NodeSample
from telemetry.rollups import MINUTE_S, floor_to
from telemetry.running import minute_rollups, running_segments

LEAK_GROWTH_PERCENT = 5
LEAK_SPAN_S = 24 * 3600
LEAK_MIN_SPAN_S = 3600  # growth is judged over at least an hour of the request's life
LEAK_AVERAGE_S = 600  # memory at each end of the span: the mean of 10 minutes
WARM_UP_S = 600  # a job's first 10 minutes (loading data and model) are not judged
JITTER_MIN_SAMPLES = 10
NETWORK_WINDOW_S = 300
NETWORK_MIN_READINGS = 3
# The kinds these checks raise and resolve (other notices, e.g. resize offers, have their own owner).
CHECK_KINDS = (NoticeKind.UTIL_JITTER, NoticeKind.MEMORY_LEAK, NoticeKind.IDLE, NoticeKind.NETWORK_SLOW)


def check_running_work(now: dt.datetime | None = None) -> dict[str, int]:
    """Run every check on the running requests; returns the notices raised per kind."""
    now = now or timezone.now()
    idle = idle_work(now)
    findings = [*_jitter(now), *_leaks(now), *idle_findings(idle, now), *_slow_networks(now)]
    raised = raise_notices(findings, kinds=CHECK_KINDS, now=now)
    act_on_idle(idle, [n for n in raised if n.kind == NoticeKind.IDLE], now)
    return dict(Counter(notice.kind for notice in raised))


def _jitter(now):
    since = floor_to(now - dt.timedelta(seconds=UTILIZATION_WINDOW_S), MINUTE_S)
    rows = (
        running_segments()
        .filter(started_at__lte=since)
        .annotate(recent=minute_rollups(since))
        .values("request_id", "request__team_id", "gpu_id", "gpu__uuid")
        .annotate(n=Sum("recent__samples"), s=Sum("recent__util_sum"), sq=Sum("recent__util_sq_sum"))
        .filter(n__gte=JITTER_MIN_SAMPLES)
    )
    jittery = defaultdict(dict)
    team_of = {}
    for row in rows:
        mean = row["s"] / row["n"]
        stddev = math.sqrt(max(0.0, row["sq"] / row["n"] - mean * mean))
        if stddev > UTIL_STDDEV_TARGET_PERCENT:
            jittery[row["request_id"]][row["gpu__uuid"]] = round(stddev, 1)
            team_of[row["request_id"]] = row["request__team_id"]
    names = _names(jittery)
    for request_id, cards in jittery.items():
        worst = max(cards.values())
        yield _on_request(
            NoticeKind.UTIL_JITTER,
            request_id,
            team_of[request_id],
            text=(
                f"{names[request_id]}: GPU utilization varies by {worst} % (standard deviation over "
                f"{UTILIZATION_WINDOW_S // 60} min; steady work stays under {UTIL_STDDEV_TARGET_PERCENT} %). "
                "The input pipeline or synchronisation may be starving the GPU."
            ),
            data={"request_id": request_id, "util_stddev_percent": cards},
        )


def _leaks(now):
    # A segment's span starts at its own time: 10 minutes after it started, at most 24 hours back.
    start = Greatest(
        Value(now - dt.timedelta(seconds=LEAK_SPAN_S)), F("started_at") + dt.timedelta(seconds=WARM_UP_S)
    )
    rows = (
        running_segments()
        .filter(started_at__lte=now - dt.timedelta(seconds=LEAK_MIN_SPAN_S + WARM_UP_S))
        .annotate(
            leak_head=minute_rollups(start, start + dt.timedelta(seconds=LEAK_AVERAGE_S)),
            leak_tail=minute_rollups(floor_to(now - dt.timedelta(seconds=LEAK_AVERAGE_S), MINUTE_S)),
        )
        .values("pk", "request_id", "request__team_id", "gpu__uuid", "started_at")
        .annotate(
            head_n=Sum("leak_head__samples"),
            head_mem=Sum("leak_head__memory_sum"),
            tail_n=Sum("leak_tail__samples"),
            tail_mem=Sum("leak_tail__memory_sum"),
        )
    )
    leaking = defaultdict(dict)
    team_of = {}
    # The two joins multiply: each head row comes once per tail row and the other way round, which
    # scales a sum and its count alike, so the means below are exact.
    for row in rows:
        if not row["head_n"] or not row["tail_n"] or not row["head_mem"]:
            continue
        first, last = row["head_mem"] / row["head_n"], row["tail_mem"] / row["tail_n"]
        growth = (last - first) / first * 100
        if growth > LEAK_GROWTH_PERCENT:
            span = now - max(
                now - dt.timedelta(seconds=LEAK_SPAN_S), row["started_at"] + dt.timedelta(seconds=WARM_UP_S)
            )
            leaking[row["request_id"]][row["gpu__uuid"]] = {
                "from_mib": round(first),
                "to_mib": round(last),
                "growth_percent": round(growth, 1),
                "over_hours": round(span.total_seconds() / 3600, 1),
            }
            team_of[row["request_id"]] = row["request__team_id"]
    names = _names(leaking)
    for request_id, cards in leaking.items():
        worst = max(cards.values(), key=lambda card: card["growth_percent"])
        yield _on_request(
            NoticeKind.MEMORY_LEAK,
            request_id,
            team_of[request_id],
            text=(
                f"{names[request_id]}: GPU memory grew {worst['growth_percent']} % in "
                f"{worst['over_hours']} h ({worst['from_mib']} → {worst['to_mib']} MiB), above the "
                f"{LEAK_GROWTH_PERCENT} % a steady job shows: a possible leak."
            ),
            data={"request_id": request_id, "cards": cards},
        )


def _slow_networks(now):
    floor = settings.TELEMETRY_NETWORK_FLOOR_BYTES_PER_S
    since = now - dt.timedelta(seconds=NETWORK_WINDOW_S)
    teams_on = defaultdict(set)
    for node_id, team_id in (
        running_segments().filter(started_at__lte=since).values_list("gpu__node_id", "request__team_id")
    ):
        teams_on[node_id].add(team_id)
    if not teams_on:
        return
    rows = (
        NodeSample.objects.filter(
            node_id__in=teams_on, sampled_at__gte=since, network_bytes_per_s__isnull=False
        )
        .values("node_id")
        .annotate(readings=Count("pk"), total=Sum("network_bytes_per_s"))
        .filter(readings__gte=NETWORK_MIN_READINGS)
    )
    names = dict(Node.objects.filter(pk__in=teams_on).values_list("pk", "name"))
    for row in rows:
        mean = row["total"] / row["readings"]
        if mean >= floor:
            continue
        for team_id in sorted(teams_on[row["node_id"]]):
            yield Finding(
                kind=NoticeKind.NETWORK_SLOW,
                team_id=team_id,
                key=f"network_slow:node:{row['node_id']}",
                subject=Node(pk=row["node_id"]),
                text=(
                    f"Node {names[row['node_id']]}, where your work runs, moved {mean / 1e6:.0f} MB/s "
                    f"over the last {NETWORK_WINDOW_S // 60} min, under the {floor / 1e6:.0f} MB/s floor: "
                    "data loading or gradient exchange may be slowing your jobs."
                ),
                data={"node_id": row["node_id"], "mean_bytes_per_s": round(mean), "floor_bytes_per_s": floor},
            )


def _on_request(kind: str, request_id: int, team_id: int, *, text: str, data: dict) -> Finding:
    """A finding on a running request: one episode per kind and request, as long as the condition holds."""
    return Finding(
        kind=kind,
        team_id=team_id,
        key=request_notice_key(kind, request_id),
        subject=GpuRequest(pk=request_id),
        text=text,
        data=data,
    )


def _names(by_request: dict) -> dict[int, str]:
    return dict(GpuRequest.objects.filter(pk__in=list(by_request)).values_list("pk", "name"))
