"""Notification channels of a team or a user, and the outbox of deliveries to them with each attempt."""

import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.db import models
from django.utils import timezone

from notifications.choices import ChannelKind, DeliveryState, EventKind
from notifications.constants import NAME_MAX_CHARS, URL_MAX_CHARS


class Channel(models.Model):
    """Where a team's (or one user's) notifications go: an email address, a signed webhook or a Slack
    incoming webhook. Exactly one of team and user owns it.

    `events`: the EventKind values it wants (empty: every kind). `paused_at` set: nothing is sent until
    its owner resumes it (set when PAUSE_AFTER_FAILED_DELIVERIES deliveries in a row were given up on,
    `failed_deliveries` counting them). The webhook secret is stored encrypted (teams.crypto) and shown
    once, when it is made.
    """

    team = models.ForeignKey(
        "teams.Team", on_delete=models.CASCADE, null=True, blank=True, related_name="notification_channels"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="notification_channels",
    )
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    name = models.CharField(max_length=NAME_MAX_CHARS)
    url = models.CharField(max_length=URL_MAX_CHARS, blank=True, help_text="webhook and slack: http(s) URL")
    email = models.EmailField(blank=True, help_text="email: the address")
    encrypted_secret = models.TextField(blank=True, editable=False, help_text="webhook: a Fernet token")
    events = models.JSONField(default=list, blank=True, help_text="EventKind values; empty: all")
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_reason = models.CharField(max_length=300, blank=True)
    failed_deliveries = models.PositiveIntegerField(default=0, help_text="given up on in a row")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(team__isnull=True, user__isnull=False)
                | models.Q(team__isnull=False, user__isnull=True),
                name="channel_one_owner",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name}"

    def wants(self, kind: str) -> bool:
        return kind == EventKind.TEST or not self.events or kind in self.events

    def event_labels(self) -> list[str]:
        """The kinds it wants, as people read them (empty: every kind)."""
        return [EventKind(kind).label for kind in self.events]

    def is_paused(self) -> bool:
        return self.paused_at is not None

    def target(self) -> str:
        """Where it sends, as pages and the API show it: the host only for a URL (a Slack URL's path is
        its credential), the address for email."""
        if self.kind == ChannelKind.EMAIL:
            return self.email
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}/…"


class DeliveryQuerySet(models.QuerySet):
    def due(self, now):
        """Pending, its next try due, and claimed by nobody (or by a worker whose claim ran out)."""
        return self.filter(state=DeliveryState.PENDING, next_attempt_at__lte=now).filter(
            models.Q(claimed_until__isnull=True) | models.Q(claimed_until__lt=now)
        )


class Delivery(models.Model):
    """One event for one channel: written in the event's transaction (the outbox), sent by a worker that
    claims it, retried with backoff. `id` is in the payload and the X-GPU-Portal-Delivery header, the same
    on every try: a receiver de-duplicates by it. `payload` is fixed when the event happens."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(
        "audit.Event", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    payload = models.JSONField()
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_until = models.DateTimeField(null=True, blank=True, help_text="a worker is sending it until then")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"]),
            models.Index(fields=["channel", "-created_at"]),
            models.Index(fields=["finished_at"]),  # the retention's prune
        ]

    def __str__(self) -> str:
        return f"{self.kind} to {self.channel_id}: {self.state}"


class DeliveryAttempt(models.Model):
    """One try of a delivery: when, how long, the HTTP status (None: no answer) or the error."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    ok = models.BooleanField()
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"try {self.number} of {self.delivery_id}: {self.status_code or self.error}"
