"""Notices to a team about its work: raised once per episode by the telemetry checks, each with an Event
on the work concerned, published live; resolved when the condition ends; dismissed by a member for
themselves, acknowledged by a team admin for the whole team (an Event on the notice)."""

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from audit.events import log_event
from audit.models import Notice, NoticeDismissal
from audit.permissions import can_acknowledge_notice, can_dismiss_notice
from infra.live import publish_after_commit
from teams.models import Team
from teams.permissions import require

CHECKS = "telemetry checks"


@dataclass(frozen=True)
class Finding:
    """A condition found on `subject` (a request or a node) for one team; `key` names its episode."""

    kind: str
    team_id: int
    key: str
    subject: object
    text: str
    data: dict = field(default_factory=dict)


def raise_notices(
    findings: Sequence[Finding], *, kinds: Iterable[str], now: dt.datetime | None = None
) -> list[Notice]:
    """Notify each finding whose episode has no open notice yet (and log its Event); resolve the open
    notices of `kinds` that no finding repeats. Returns the notices raised now.

    Two checks running at once cannot raise one episode twice: the open notice of a team and key is
    unique, and the loser's savepoint (notice and event) rolls back."""
    now = now or timezone.now()
    kinds = list(kinds)
    found = {(f.team_id, f.key) for f in findings}
    open_now = {(n.team_id, n.key): n for n in Notice.objects.open().filter(kind__in=kinds)}
    ended = [n.pk for episode, n in open_now.items() if episode not in found]
    Notice.objects.filter(pk__in=ended).update(resolved_at=now)
    raised = []
    for finding in findings:
        if (finding.team_id, finding.key) in open_now:
            continue
        try:
            with transaction.atomic():
                notice = Notice.objects.create(
                    team_id=finding.team_id,
                    kind=finding.kind,
                    key=finding.key,
                    text=finding.text[:500],
                    data=finding.data,
                    created_at=now,
                )
                log_event(
                    finding.subject,
                    finding.kind,
                    actor_name=CHECKS,
                    reason=finding.text,
                    team=Team(pk=finding.team_id),
                    data=finding.data,
                )
        except IntegrityError:
            continue  # another check raised this episode first
        publish_after_commit(notice.team_id, notice_message(notice))
        raised.append(notice)
    return raised


def request_notice_key(kind: str, request_id: int) -> str:
    """The episode key of a notice about one request: one open notice per kind and request."""
    return f"{kind}:request:{request_id}"


def resolve_notice(team_id: int, key: str, *, now: dt.datetime) -> bool:
    """End the open notice of this team and key before the next check does (its condition is known to
    be over); False when none was open."""
    return bool(Notice.objects.open().filter(team_id=team_id, key=key).update(resolved_at=now))


def notice_message(notice: Notice) -> dict:
    """A notice as the team's live stream carries it."""
    return {
        "object": "notice",
        "id": notice.pk,
        "kind": notice.kind,
        "text": notice.text,
        "data": notice.data,
        "at": notice.created_at.isoformat(),
        "acknowledged": notice.acknowledged_at is not None,
    }


def dismiss_notice(notice: Notice, *, user, now: dt.datetime | None = None) -> NoticeDismissal:
    """A member has read it: it leaves their own lists, not the rest of the team's (its episode stays
    open, so it is not raised again). Dismissing twice keeps the first time."""
    require(can_dismiss_notice(user, notice), "Only members of the notice's team can dismiss it.")
    dismissal, _ = NoticeDismissal.objects.get_or_create(
        notice=notice, user=user, defaults={"dismissed_at": now or timezone.now()}
    )
    return dismissal


def acknowledge_notice(notice: Notice, *, user, now: dt.datetime | None = None) -> Notice:
    """A team admin has dealt with it for the team: it leaves every member's lists. Under the notice's row
    lock, once (a second acknowledgement changes nothing); an Event on the notice says who and when, and
    the team's live stream carries it."""
    require(can_acknowledge_notice(user, notice), "Only the team's admins can acknowledge a notice for it.")
    with transaction.atomic():
        locked = Notice.objects.select_for_update().get(pk=notice.pk)
        if locked.acknowledged_at is None:
            locked.acknowledged_at, locked.acknowledged_by = now or timezone.now(), user
            locked.save(update_fields=["acknowledged_at", "acknowledged_by"])
            log_event(
                locked,
                "acknowledged",
                actor=user,
                team=locked.team,
                reason=f"acknowledged for the team: {locked.text}"[:500],
                data={"kind": locked.kind},
            )
            publish_after_commit(locked.team_id, notice_message(locked))
    return locked


def visible_notices(user) -> QuerySet[Notice]:
    """The notices of the user's teams (members only: an operator reads them in the audit log), each with
    `dismissed_at`: when this user dismissed it (None: not dismissed)."""
    mine = NoticeDismissal.objects.filter(notice=OuterRef("pk"), user=user).values("dismissed_at")[:1]
    return Notice.objects.filter(team__memberships__user=user).annotate(dismissed_at=Subquery(mine))


def notices_for(user, *, team: Team | None = None, kind: str = "", limit: int = 5) -> QuerySet[Notice]:
    """The notices the user still has to read, of their teams (or one of them; of one kind when given),
    newest first: a short list for the home, team and budget pages."""
    notices = visible_notices(user).unread_by(user).select_related("team")
    if team is not None:
        notices = notices.filter(team=team)
    if kind:
        notices = notices.filter(kind=kind)
    return notices[:limit]
