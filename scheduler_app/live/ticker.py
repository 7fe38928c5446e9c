"""The 1 Hz live ticker: the cluster's latest readings as a frame, and only what changed sent out.

A frame holds per card its latest fresh util (percent, or None when the card has
no reading younger than LIVE_READING_MAX_AGE_S), per open allocation its team,
request, card and that card's util and memory in use (percent of the card's), and
per pool the mean util of its cards with a reading and the free milli-GPU on ready
nodes (less what the portal's slices and work outside the portal hold). The previous frame
is kept in the cache (Redis in production, so any worker may run the next tick); each tick
sends to each team's group the cards and pools whose values changed and the team's own
allocations that changed; operators get every allocation.
"""

import datetime as dt
import json
import logging
from collections import defaultdict

from django.core.cache import cache
from django.utils import timezone
from redis.exceptions import RedisError

from infra.live import operator_group, send_to_groups, team_group
from scheduler_app.choices import NodeStatus
from scheduler_app.constants import LIVE_READING_MAX_AGE_S, MILLI_PER_GPU
from scheduler_app.live.readings import latest_readings
from scheduler_app.models import Allocation, Gpu
from teams.models import Team

log = logging.getLogger(__name__)

FRAME_KEY = "live:frame"
FRAME_TTL_S = 60
EMPTY_FRAME = {"gpus": {}, "allocations": {}, "pools": {}}


def current_frame(now: dt.datetime | None = None) -> dict:
    """The cluster as the live stream shows it now; JSON-ready, keys are strings.

    Two queries whatever the cluster size: cards with their latest fresh reading
    (scheduler_app.live.readings: telemetry's, one index lookup per card), and open allocations.
    """
    now = now or timezone.now()
    since = now - dt.timedelta(seconds=LIVE_READING_MAX_AGE_S)
    cards = Gpu.objects.annotate(**latest_readings(since)).values_list(
        "pk", "node__pool__name", "node__status", "util", "used_mib", "memory_mib", "foreign_milli"
    )
    open_allocations = Allocation.objects.committed().values_list(
        "pk", "gpu_id", "milli", "request_id", "request__team_id"
    )

    gpus: dict[str, int | None] = {}
    memory: dict[int, float | None] = {}
    pool_of: dict[int, str] = {}
    ready_cards: dict[str, int] = defaultdict(int)
    held_outside: dict[str, int] = defaultdict(int)  # by work outside the portal, on ready cards
    readings: dict[str, list[int]] = defaultdict(list)
    for gpu_id, pool, status, util, used_mib, memory_mib, foreign_milli in cards:
        gpus[str(gpu_id)] = util
        memory[gpu_id] = None if used_mib is None else round(100 * used_mib / memory_mib, 1)
        pool_of[gpu_id] = pool if status == NodeStatus.READY else ""
        ready_cards[pool] += status == NodeStatus.READY
        held_outside[pool] += foreign_milli if status == NodeStatus.READY else 0
        if util is not None:
            readings[pool].append(util)

    allocations = {}
    held_on_ready: dict[str, int] = defaultdict(int)
    for allocation_id, gpu_id, milli, request_id, team_id in open_allocations:
        allocations[str(allocation_id)] = {
            "team": team_id,
            "request": request_id,
            "gpu": gpu_id,
            "util": gpus.get(str(gpu_id)),
            "mem": memory.get(gpu_id),
        }
        held_on_ready[pool_of.get(gpu_id, "")] += milli
    pools = {
        pool: {
            "util": round(sum(readings[pool]) / len(readings[pool]), 1) if readings[pool] else None,
            "free_milli": ready_cards[pool] * MILLI_PER_GPU - held_on_ready[pool] - held_outside[pool],
        }
        for pool in ready_cards
    }
    return {"gpus": gpus, "allocations": allocations, "pools": pools}


def frame_delta(previous: dict, current: dict) -> dict:
    """Per part, the entries whose values changed; an entry gone since `previous` maps to None."""
    delta = {}
    for part in ("gpus", "allocations", "pools"):
        before, now = previous.get(part, {}), current[part]
        changed = {key: value for key, value in now.items() if key not in before or before[key] != value}
        changed.update({key: None for key in before.keys() - now.keys()})
        delta[part] = changed
    return delta


def allocations_of_team(allocations: dict, team_ids: set[int]) -> dict:
    """Only the allocations the teams hold."""
    return {key: public_allocation(value) for key, value in allocations.items() if value["team"] in team_ids}


def public_allocation(entry: dict | None) -> dict | None:
    """What a client receives about an allocation: its request, card, util and memory, not the routing key."""
    return None if entry is None else {k: v for k, v in entry.items() if k != "team"}


def latest_frame() -> dict:
    """The frame the last tick sent (what a newly connected client starts from)."""
    try:
        return cache.get(FRAME_KEY) or EMPTY_FRAME
    except RedisError as error:
        log.warning("cannot reach Redis to read the live frame: %s", error)
        return EMPTY_FRAME


def snapshot_for(frame: dict, *, team_ids: set[int] | None) -> dict:
    """The whole frame for one client: every allocation for operators (team_ids None), else its teams'."""
    allocations = frame["allocations"]
    if team_ids is None:
        visible = {key: public_allocation(value) for key, value in allocations.items()}
    else:
        visible = allocations_of_team(allocations, team_ids)
    return {"type": "snapshot", "gpus": frame["gpus"], "pools": frame["pools"], "allocations": visible}


def tick(now: dt.datetime | None = None) -> dict:
    """Compute the frame, store it, and send what changed since the last one; returns counts sent."""
    now = now or timezone.now()
    frame = current_frame(now)
    try:
        previous = cache.get(FRAME_KEY) or EMPTY_FRAME
        cache.set(FRAME_KEY, frame, timeout=FRAME_TTL_S)
    except RedisError as error:
        log.warning("cannot reach Redis for the live ticker: %s", error)
        return {"gpus": 0, "allocations": 0, "pools": 0}
    delta = frame_delta(previous, frame)
    _send(_tick_texts(delta, previous, now.isoformat()))
    return {part: len(values) for part, values in delta.items()}


def _tick_texts(delta: dict, previous: dict, at: str) -> list[tuple[str, str]]:
    """(group, JSON text) per group with something to say: the cards and pools that changed, and the
    allocations that changed among those the group may see. One frame a tick per client, serialized
    here once per group (a consumer forwards the text as it is: 500 clients cost a few encodings)."""
    cluster = {"type": "tick", "at": at, **{part: delta[part] for part in ("gpus", "pools") if delta[part]}}
    cluster_only = json.dumps(cluster, separators=(",", ":")) if len(cluster) > 2 else None
    by_team: dict[int, dict] = defaultdict(dict)
    for key, value in delta["allocations"].items():
        owner = (value or previous["allocations"][key])["team"]
        by_team[owner][key] = public_allocation(value)
    everyone = {key: public_allocation(value) for key, value in delta["allocations"].items()}

    def text(allocations: dict) -> str | None:
        if not allocations:
            return cluster_only
        return json.dumps({**cluster, "allocations": allocations}, separators=(",", ":"))

    texts = [
        (team_group(team_id), text(by_team.get(team_id, {})))
        for team_id in Team.objects.values_list("pk", flat=True)
    ]
    texts.append((operator_group(), text(everyone)))
    return [(group, body) for group, body in texts if body is not None]


def _send(texts: list[tuple[str, str]]) -> None:
    send_to_groups([(group, {"type": "live.tick", "text": text}) for group, text in texts])
