"""Every write to notification channels: add, change, delete, pause and resume (by hand, or when it keeps
failing), a new webhook secret, a test message. Each checks who may, logs an Event on the channel, and
runs under the channel's row lock where it changes one."""

import datetime as dt
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import EmailValidator, URLValidator
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.choices import NoticeKind
from audit.events import log_event
from audit.models import Notice
from audit.notices import notice_message
from infra.live import publish_after_commit
from notifications.choices import ChannelKind, EventKind
from notifications.constants import NAME_MAX_CHARS, URL_MAX_CHARS
from notifications.egress import save_problem
from notifications.kinds import summary
from notifications.models import Channel, Delivery
from notifications.outbox import send_after_commit
from notifications.permissions import can_add_channel, can_manage_channel
from notifications.signing import new_secret
from teams.choices import Role
from teams.crypto import encrypt
from teams.models import Membership, Team
from teams.permissions import require

PAUSED = NoticeKind.CHANNEL_PAUSED
CHOOSABLE = [kind for kind in EventKind.values if kind != EventKind.TEST]


def create_channel(
    actor, *, team: Team | None, kind: str, name: str, url: str = "", email: str = "", events=()
) -> tuple[Channel, str]:
    """A channel of `team` (its admins only) or else of `actor`; returns it and, for a webhook, its new
    signing secret (shown this once: only its encrypted form is kept)."""
    require(
        can_add_channel(actor, team),
        f"Only the admins of {team.name} add its channels." if team else "Sign in first.",
    )
    fields = _cleaned(kind=kind, name=name, url=url, email=email, events=events)
    secret = new_secret() if kind == ChannelKind.WEBHOOK else ""
    with transaction.atomic():
        channel = Channel.objects.create(
            team=team,
            user=None if team else actor,
            kind=kind,
            encrypted_secret=encrypt(secret) if secret else "",
            created_by=actor,
            **fields,
        )
        _log(channel, "created", actor, f"{channel.get_kind_display()} channel {channel.name} added")
    return channel, secret


def update_channel(channel: Channel, *, actor, **changes) -> Channel:
    """Change its name, URL or address, or the event kinds it wants (those given in `changes`)."""
    require(can_manage_channel(actor, channel), "Only the channel's owner (or its team's admins) change it.")
    current = {"name": channel.name, "url": channel.url, "email": channel.email, "events": channel.events}
    fields = _cleaned(kind=channel.kind, **(current | changes))
    with transaction.atomic():
        locked = Channel.objects.select_for_update().get(pk=channel.pk)
        for field, value in fields.items():
            setattr(locked, field, value)
        locked.save(update_fields=list(fields))
        _log(locked, "changed", actor, f"channel {locked.name} changed: {', '.join(sorted(changes))}")
    return locked


def delete_channel(channel: Channel, *, actor) -> None:
    """Delete it with its delivery log; nothing more is sent to it."""
    require(can_manage_channel(actor, channel), "Only the channel's owner (or its team's admins) delete it.")
    with transaction.atomic():
        _log(channel, "deleted", actor, f"channel {channel.name} deleted")
        Channel.objects.filter(pk=channel.pk).delete()


def rotate_secret(channel: Channel, *, actor) -> str:
    """A new signing secret for a webhook channel, answered once; the old one signs nothing more."""
    require(can_manage_channel(actor, channel), "Only the channel's owner (or its team's admins) change it.")
    if channel.kind != ChannelKind.WEBHOOK:
        raise ValidationError({"kind": "Only webhook channels have a signing secret."})
    secret = new_secret()
    with transaction.atomic():
        Channel.objects.filter(pk=channel.pk).update(encrypted_secret=encrypt(secret))
        _log(channel, "secret_rotated", actor, f"channel {channel.name}: new signing secret")
    return secret


def pause_channel(channel: Channel, *, reason: str, now: dt.datetime | None = None, actor=None) -> Channel:
    """Stop sending to it until it is resumed: by its owner, or by the delivery worker when it keeps
    failing (no actor), which also tells the owner: a notice to the team, an email to the owner or the
    team's admins. Events while it is paused are not queued for it."""
    if actor is not None:
        require(
            can_manage_channel(actor, channel), "Only the channel's owner (or its team's admins) pause it."
        )
    now = now or timezone.now()
    with transaction.atomic():
        locked = Channel.objects.select_for_update().get(pk=channel.pk)
        if locked.paused_at is not None:
            return locked
        locked.paused_at, locked.paused_reason = now, reason[:300]
        locked.save(update_fields=["paused_at", "paused_reason"])
        _log(locked, PAUSED, actor, f"channel {locked.name} paused: {reason}", actor_name="notifications")
        if actor is None:
            _tell_owner(locked, now)
    return locked


def resume_channel(channel: Channel, *, actor) -> Channel:
    """Send to it again (its failure count starts over; its pause notice is resolved)."""
    require(can_manage_channel(actor, channel), "Only the channel's owner (or its team's admins) resume it.")
    with transaction.atomic():
        locked = Channel.objects.select_for_update().get(pk=channel.pk)
        if locked.paused_at is None:
            return locked
        locked.paused_at, locked.paused_reason, locked.failed_deliveries = None, "", 0
        locked.save(update_fields=["paused_at", "paused_reason", "failed_deliveries"])
        Notice.objects.open().filter(kind=PAUSED, key=_notice_key(locked)).update(resolved_at=timezone.now())
        _log(locked, "resumed", actor, f"channel {locked.name} resumed")
    return locked


def send_test(channel: Channel, *, actor) -> Delivery:
    """Queue a test message to the channel (sent and logged as any delivery)."""
    require(can_manage_channel(actor, channel), "Only the channel's owner (or its team's admins) test it.")
    if channel.is_paused():
        raise ValidationError({"channel": "The channel is paused: resume it first."})
    now = timezone.now()
    delivery_id = uuid.uuid4()
    team = channel.team
    text = summary(
        EventKind.TEST,
        team_name=team.name if team else "",
        subject_name=channel.name,
        reason=f"sent by {actor.get_username()}",
    )
    with transaction.atomic():
        delivery = Delivery.objects.create(
            id=delivery_id,
            channel=channel,
            kind=EventKind.TEST,
            payload={
                "id": str(delivery_id),
                "type": EventKind.TEST.value,
                "created_at": now.isoformat(),
                "event_id": None,
                "team": {"slug": team.slug, "name": team.name} if team else None,
                "subject": {"type": "channel", "id": channel.pk, "name": channel.name},
                "from_state": "",
                "to_state": "",
                "actor": actor.get_username(),
                "reason": "test message",
                "data": {},
                "text": text,
            },
            next_attempt_at=now,
            created_at=now,
        )
        send_after_commit([delivery.pk])
    return delivery


def _cleaned(*, kind: str, name, url, email, events) -> dict:
    """The channel's fields, or ValidationError naming each bad one."""
    errors = {}
    if kind not in ChannelKind.values:
        errors["kind"] = f"Choose one of: {', '.join(ChannelKind.values)}."
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX_CHARS or not _printable(name):
        errors["name"] = f"Give a name of 1 to {NAME_MAX_CHARS} printable characters."
    if kind == ChannelKind.EMAIL:
        url = ""
        try:
            if not isinstance(email, str) or not _printable(email):
                raise ValidationError("bad")
            EmailValidator()(email)
        except ValidationError:
            errors["email"] = "Give the email address to send to, such as team@example.org."
    elif kind in ChannelKind.values:
        email = ""
        if problem := url_problem(url):
            errors["url"] = problem
    if not isinstance(events, list | tuple) or any(
        not isinstance(e, str) or e not in CHOOSABLE for e in events
    ):
        errors["events"] = f"Give a list of event kinds from: {', '.join(CHOOSABLE)} (empty: all of them)."
    if errors:
        raise ValidationError(errors)
    return {"name": name.strip(), "url": url, "email": email, "events": sorted(set(events))}


def url_problem(url) -> str:
    """Why `url` cannot be a channel's address, or "": not an http(s) URL, or one into the portal's own
    network (notifications.egress)."""
    if not isinstance(url, str) or not url:
        return "Give the http:// or https:// URL to send to."
    if len(url) > URL_MAX_CHARS:
        return f"A URL has at most {URL_MAX_CHARS} characters."
    if not _printable(url) or any(c.isspace() for c in url):
        return "A URL holds no spaces, control characters or invalid Unicode."
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        return "Give an http:// or https:// URL, such as https://hooks.example.org/gpu-portal."
    if "@" in url.split("//", 1)[1].split("/", 1)[0]:
        return "Put no user name or password in the URL."
    return save_problem(url)


def _printable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return text.isprintable()


def _notice_key(channel: Channel) -> str:
    return f"channel_paused:{channel.pk}"


def _log(channel: Channel, to_state: str, actor, reason: str, actor_name: str = "") -> None:
    log_event(
        channel,
        to_state,
        actor=actor,
        actor_name=actor_name,
        team=channel.team,
        reason=reason,
        data={"kind": channel.kind, "name": channel.name},
    )


def _tell_owner(channel: Channel, now: dt.datetime) -> None:
    """The pause notice (a team channel's) and an email to the user or the team's admins, after commit."""
    text = f"Notification channel {channel.name} is paused: {channel.paused_reason} Resume it once fixed."
    if channel.team_id:
        try:
            with transaction.atomic():
                notice = Notice.objects.create(
                    team_id=channel.team_id,
                    kind=PAUSED,
                    key=_notice_key(channel),
                    text=text[:500],
                    data={"channel_id": channel.pk},
                    created_at=now,
                )
            publish_after_commit(channel.team_id, notice_message(notice))
        except IntegrityError:
            pass  # its open notice is there already
        to = Membership.objects.filter(team_id=channel.team_id, role=Role.TEAM_ADMIN).values_list(
            "user__email", flat=True
        )
    else:
        to = [channel.user.email]
    addresses = [a for a in to if a and a != channel.email]
    if addresses:
        transaction.on_commit(
            lambda: send_mail(
                "[GPU Portal] notification channel paused",
                text,
                settings.DEFAULT_FROM_EMAIL,
                addresses,
                fail_silently=True,
            )
        )
