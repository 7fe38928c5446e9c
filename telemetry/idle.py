"""Idle work, by its team's idle policy (Team.idle_seconds, Team.idle_util_percent).

A running request is idle since the latest of: its current run's start, the end of the last minute any
of its cards reached the team's utilization threshold, and, for interactive work (no command), the last
terminal input or kernel execution (GpuRequest.last_activity_at, services.sessions.record_activity). A
card without readings in the window is not judged idle (nothing known), as a card read only since
part-way through it is idle only since its first reading.

- Batch work idle for the team's idle time gets a notice (and is released under the team's policy).
- Interactive work gets a warning (the same `idle` notice, so a notice, a live update and the
  notification) idle_warning_lead_s before its idle time is up, and is then stopped gracefully: told to
  checkpoint within PREEMPTION_GRACE_S, then ended released. It never stops less than the lead after
  its warning, even when a check came late. Input after the warning withdraws it (record_activity), as
  utilization over the threshold does at the next check.

Card readings are the whole card's: on a shared card a busy neighbour keeps a slice from looking idle,
the safe side for stopping work.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min, Q

from audit.choices import NoticeKind
from audit.models import Notice
from audit.notices import Finding, request_notice_key
from infra.conflicts import StateConflict
from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.rules.lifecycle import release_target
from scheduler_app.services.transitions import stop_gracefully, transition_request
from teams.models import Team
from telemetry.rollups import MINUTE_S, floor_to
from telemetry.running import minute_rollups, running_segments

POLICY = "idle policy"  # the actor of idle releases and stops (notifications.constants.IDLE_POLICY_ACTOR)
WARNING_LEAD_MIN_S = 60
WARNING_LEAD_MAX_S = 300
WARNING_LEAD_PERCENT = 10


def idle_warning_lead_s(idle_s: int) -> int:
    """How long before an interactive request's stop its warning goes out: 10 % of the idle time, at
    least a minute (one telemetry check), at most five minutes."""
    return min(WARNING_LEAD_MAX_S, max(WARNING_LEAD_MIN_S, idle_s * WARNING_LEAD_PERCENT // 100))


@dataclass(frozen=True)
class IdleWork:
    """A running request's idleness: since when (aware UTC), by its team's policy."""

    request_id: int
    team_id: int
    name: str
    interactive: bool
    since: dt.datetime
    idle_s: int
    util_percent: int
    release: bool

    def idle_for_s(self, now: dt.datetime) -> float:
        return (now - self.since).total_seconds()


def idle_work(now: dt.datetime) -> list[IdleWork]:
    """Every running request whose cards all have readings, with since when it is idle (it may be a
    moment ago). One aggregate query per distinct team policy."""
    policies = defaultdict(list)
    teams = Team.objects.filter(requests__state=RequestState.RUNNING).distinct()
    for team in teams.only("pk", "idle_minutes", "idle_util_percent", "release_idle_allocations"):
        policies[team.idle_seconds(), team.idle_util_percent].append(team)
    since_of: dict[int, dt.datetime | None] = {}
    team_of = {}
    for (idle_s, percent), members in policies.items():
        start = floor_to(now - dt.timedelta(seconds=idle_s), MINUTE_S)
        rows = (
            running_segments()
            .filter(request__team__in=members)
            .annotate(recent=minute_rollups(start))
            .values("request_id", "started_at")
            .annotate(
                busy=Max("recent__bucket_start", filter=Q(recent__util_max__gte=percent)),
                first=Min("recent__bucket_start"),
            )
        )
        for row in rows:
            team_of[row["request_id"]] = (idle_s, percent)
            since_of[row["request_id"]] = _later(
                since_of.get(row["request_id"], row["started_at"]), _card(row)
            )
    requests = GpuRequest.objects.filter(pk__in=[pk for pk, since in since_of.items() if since is not None])
    work = []
    by_team = {team.pk: team for members in policies.values() for team in members}
    for request in requests.only("pk", "team_id", "name", "command", "last_activity_at"):
        since, interactive = since_of[request.pk], request.is_interactive()
        if interactive and request.last_activity_at:
            since = max(since, request.last_activity_at)
        idle_s, percent = team_of[request.pk]
        release = by_team[request.team_id].release_idle_allocations
        work.append(
            IdleWork(request.pk, request.team_id, request.name, interactive, since, idle_s, percent, release)
        )
    return work


def _card(row) -> dt.datetime | None:
    """Since when one card of the request has been idle; None when it has no reading in the window."""
    if row["first"] is None:
        return None
    quiet_from = row["busy"] + dt.timedelta(seconds=MINUTE_S) if row["busy"] else row["first"]
    return max(quiet_from, row["started_at"])


def _later(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    return None if a is None or b is None else max(a, b)


def idle_findings(work: Iterable[IdleWork], now: dt.datetime) -> Iterator[Finding]:
    """The `idle` notices due: batch work idle for its idle time, interactive work within the warning
    lead of it (the warning names when it stops)."""
    for item in work:
        idle_for, minutes = item.idle_for_s(now), item.idle_s // 60
        data = {"request_id": item.request_id, "idle_s": item.idle_s, "release": False}
        if not item.interactive:
            if idle_for < item.idle_s:
                continue
            then = (
                " It is released under your team's policy." if item.release else " Release it if it is done."
            )
            text = (
                f"{item.name}: its GPUs have been under {item.util_percent} % utilization for {minutes} min."
                + then
            )
            data["release"] = item.release
        else:
            lead = idle_warning_lead_s(item.idle_s)
            if idle_for < item.idle_s - lead:
                continue
            stop_at = max(item.since + dt.timedelta(seconds=item.idle_s), now + dt.timedelta(seconds=lead))
            text = (
                f"{item.name}: idle for {int(idle_for) // 60} min (GPUs under {item.util_percent} % "
                f"utilization, no terminal input or kernel run). It stops at {stop_at:%H:%M} UTC, with "
                f"{settings.PREEMPTION_GRACE_S} s to checkpoint, unless it is used before."
            )
            data |= {"interactive": True, "stop_at": stop_at.isoformat()}
        yield Finding(
            kind=NoticeKind.IDLE,
            team_id=item.team_id,
            key=request_notice_key(NoticeKind.IDLE, item.request_id),
            subject=GpuRequest(pk=item.request_id, team_id=item.team_id),
            text=text,
            data=data,
        )


def act_on_idle(work: Iterable[IdleWork], raised: Iterable[Notice], now: dt.datetime) -> list[int]:
    """Release the batch work whose notice was raised now under its team's policy; stop the interactive
    work whose warning's time is up. Returns the requests stopped (interactive)."""
    for notice in raised:
        if notice.data.get("release"):
            _release(notice.data["request_id"], notice.text)
    due = {item.request_id: item for item in work if item.interactive and item.idle_for_s(now) >= item.idle_s}
    if not due:
        return []
    warnings = Notice.objects.open().filter(
        kind=NoticeKind.IDLE, key__in=[request_notice_key(NoticeKind.IDLE, pk) for pk in due]
    )
    stopped = []
    for notice in warnings:
        item = due.get(notice.data.get("request_id"))
        if item and notice.data.get("stop_at") and dt.datetime.fromisoformat(notice.data["stop_at"]) <= now:
            stopped += _stop(item, now)
    return stopped


def _release(request_id: int, reason: str) -> None:
    request = GpuRequest.objects.get(pk=request_id)
    to_state = release_target(request.state)
    if to_state is None:
        return
    with suppress(StateConflict):  # it moved on (ended, migrating) since the check: nothing to release
        transition_request(request, to_state, actor_name=POLICY, reason=reason)


def _stop(item: IdleWork, now: dt.datetime) -> list[int]:
    """Stop it gracefully, unless it was used or moved on since the check looked (under its row lock)."""
    with transaction.atomic():
        row = GpuRequest.objects.select_for_update().get(pk=item.request_id)
        if row.state != RequestState.RUNNING or (row.last_activity_at and row.last_activity_at > item.since):
            return []
        stop_gracefully(
            [row.pk],
            deadline=now + dt.timedelta(seconds=settings.PREEMPTION_GRACE_S),
            reason=f"idle for {item.idle_s // 60} min",
            actor_name=POLICY,
            release=True,
            now=now,
        )
    return [row.pk]
