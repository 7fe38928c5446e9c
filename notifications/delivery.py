"""Sending deliveries: claim one (a conditional update, so two workers never send it at once), send it
outside any transaction, record the attempt, then mark it delivered or schedule its next try with
exponential backoff; after MAX_ATTEMPTS it is given up on, and PAUSE_AFTER_FAILED_DELIVERIES given up in
a row pause the channel.

At least once, de-duplicated by id: a worker killed between sending and recording leaves its claim to
run out, and the next scan sends the same delivery (same id, same body) again."""

import datetime as dt
import json
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from notifications.choices import ChannelKind, DeliveryState
from notifications.constants import (
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    CLAIM_MARGIN_S,
    DELIVERY_HEADER,
    EVENT_HEADER,
    MAX_ATTEMPTS,
    PAUSE_AFTER_FAILED_DELIVERIES,
    SCAN_BATCH,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
)
from notifications.egress import post
from notifications.models import Channel, Delivery, DeliveryAttempt
from notifications.services import pause_channel
from notifications.signing import signature
from teams.crypto import decrypt

USER_AGENT = "GPU-Portal-Notifications/1"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""


def backoff_s(attempts: int) -> int:
    """The wait after the `attempts`-th failed try: 10 s, 20 s, 40 s ... at most an hour."""
    return min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S)


def body_of(delivery: Delivery) -> bytes:
    """The bytes a webhook is sent, the same on every try (what the signature covers)."""
    return json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()


def deliver_due(now: dt.datetime | None = None) -> dict[str, int]:
    """The scan (beat's notification-deliveries, the embedded worker's thread): send every due delivery of
    an unpaused channel, oldest due first, up to SCAN_BATCH; returns how many ended in each state."""
    now = now or timezone.now()
    due = (
        Delivery.objects.due(now)
        .filter(channel__paused_at__isnull=True)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:SCAN_BATCH]
    )
    counts: dict[str, int] = {}
    for delivery_id in list(due):
        state = deliver(delivery_id, now=now)
        if state is not None:
            counts[state] = counts.get(state, 0) + 1
    return counts


def deliver(delivery_id, *, now: dt.datetime | None = None) -> str | None:
    """Try one delivery if it is due and nobody else holds it; returns its state after the try, or None
    when there was nothing to do (delivered already, not due, claimed by another worker, channel paused)."""
    now = now or timezone.now()
    claim_until = now + dt.timedelta(seconds=settings.NOTIFICATION_TIMEOUT_S + CLAIM_MARGIN_S)
    claimed = (
        Delivery.objects.due(now)
        .filter(pk=delivery_id, channel__paused_at__isnull=True)
        .update(claimed_until=claim_until)
    )
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("channel__team", "channel__user").get(pk=delivery_id)
    started = time.monotonic()
    outcome = send(delivery)
    duration_ms = round((time.monotonic() - started) * 1000)
    return _record(delivery, outcome, now, duration_ms)


def send(delivery: Delivery) -> Outcome:
    """One try, by the channel's kind; any failure is an Outcome, never an exception."""
    channel = delivery.channel
    try:
        if channel.kind == ChannelKind.EMAIL:
            subject = f"[GPU Portal] {delivery.payload['text']}"[:200]
            send_mail(subject, delivery.payload["text"], settings.DEFAULT_FROM_EMAIL, [channel.email])
            return Outcome(ok=True)
        if channel.kind == ChannelKind.SLACK:
            body = json.dumps({"text": delivery.payload["text"]}).encode()
            headers = {"Content-Type": "application/json"}
        else:
            body = body_of(delivery)
            timestamp = int(time.time())  # when it is sent, as the receiver's clock sees it
            headers = {
                "Content-Type": "application/json",
                DELIVERY_HEADER: str(delivery.pk),
                EVENT_HEADER: delivery.kind,
                TIMESTAMP_HEADER: str(timestamp),
                SIGNATURE_HEADER: signature(decrypt(channel.encrypted_secret), timestamp, body),
            }
        status_code = post(
            channel.url,
            body=body,
            headers={"User-Agent": USER_AGENT, **headers},
            timeout_s=settings.NOTIFICATION_TIMEOUT_S,
        )
    except Exception as error:  # a refused address or connection, a timeout, a mail server away: a failed try
        return Outcome(ok=False, error=f"{type(error).__name__}: {error}"[:300])
    ok = 200 <= status_code < 300
    return Outcome(ok=ok, status_code=status_code, error="" if ok else f"HTTP {status_code}")


def _record(delivery: Delivery, outcome: Outcome, now: dt.datetime, duration_ms: int) -> str:
    """The attempt, and the delivery's state after it, under the delivery's row lock."""
    with transaction.atomic():
        locked = Delivery.objects.select_for_update().get(pk=delivery.pk)
        locked.attempts += 1
        DeliveryAttempt.objects.create(
            delivery=locked,
            number=locked.attempts,
            started_at=now,
            duration_ms=duration_ms,
            status_code=outcome.status_code,
            ok=outcome.ok,
            error=outcome.error,
        )
        locked.claimed_until = None
        if outcome.ok:
            locked.state, locked.finished_at, locked.last_error = DeliveryState.DELIVERED, now, ""
            Channel.objects.filter(pk=locked.channel_id, failed_deliveries__gt=0).update(failed_deliveries=0)
        else:
            locked.last_error = outcome.error
            if locked.attempts >= MAX_ATTEMPTS:
                locked.state, locked.finished_at = DeliveryState.FAILED, now
                Channel.objects.filter(pk=locked.channel_id).update(
                    failed_deliveries=F("failed_deliveries") + 1
                )
                channel = Channel.objects.get(pk=locked.channel_id)
                if channel.failed_deliveries >= PAUSE_AFTER_FAILED_DELIVERIES:
                    pause_channel(
                        channel,
                        reason=f"{channel.failed_deliveries} deliveries in a row failed "
                        f"(each tried {MAX_ATTEMPTS} times); the last: {outcome.error}",
                        now=now,
                    )
            else:
                locked.next_attempt_at = now + dt.timedelta(seconds=backoff_s(locked.attempts))
        locked.save(
            update_fields=[
                "attempts",
                "claimed_until",
                "state",
                "finished_at",
                "last_error",
                "next_attempt_at",
            ]
        )
    return locked.state
