"""The event log: an append-only record of every state change, for timelines, the audit page and the
estimates' replay."""

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils import timezone

from audit.choices import NoticeKind
from teams.permissions import NotAllowed

APPEND_ONLY = "The event log is append-only."
# The units of the values services put in Event.data, as the audit page shows them.
UNITS = {
    "guaranteed_milli": " milli-GPU",
    "granularity_milli": " milli-GPU",
    "usd_per_gpu_hour": " USD/GPU-h",
}


class EventQuerySet(models.QuerySet):
    def delete(self):
        raise NotAllowed(APPEND_ONLY)

    def update(self, **kwargs):
        raise NotAllowed(APPEND_ONLY)


class Event(models.Model):
    """An append-only record of one state change: who or what, on which object, from, to, why, when.

    from_state/to_state are states (a request's, a node's, a member's role); numbers and other
    structured details go in `data` (e.g. {"guaranteed_milli": {"from": 0, "to": 500}}).
    """

    # Indexed by (content_type, object_id, created_at) below.
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT, db_index=False)
    object_id = models.PositiveBigIntegerField()
    subject = GenericForeignKey("content_type", "object_id")
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    actor_label = models.CharField(max_length=100, help_text="The user, or the system part that acted.")
    from_state = models.CharField(max_length=32, blank=True)
    to_state = models.CharField(max_length=32)
    reason = models.CharField(max_length=500, blank=True)
    data = models.JSONField(default=dict, blank=True, help_text="Structured details: values changed, units.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        db_table = "scheduler_app_event"  # created by scheduler_app before the log moved here; kept in place
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["content_type", "object_id", "created_at"])]

    def __str__(self) -> str:
        when = f"{self.created_at:%Y-%m-%d %H:%M:%S}"
        return f"{when} {self.actor_label}: {self.from_state or '∅'} → {self.to_state}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise NotAllowed(APPEND_ONLY)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise NotAllowed(APPEND_ONLY)

    def subject_type(self) -> ContentType:
        """Its subject's content type, from Django's cache: a batch of new events (a pass writes
        thousands) costs no query each."""
        return ContentType.objects.get_for_id(self.content_type_id)

    def change(self) -> str:
        """The change as people read it: "pending → running", or each changed value in `data` with its
        unit ("guaranteed_milli: 0 → 500 milli-GPU")."""
        values = [
            f"{name}: {_shown(value['from'])} → {_shown(value['to'])}{UNITS.get(name, '')}"
            for name, value in self.data.items()
            if isinstance(value, dict) and value.keys() == {"from", "to"}
        ]
        states = f"{self.from_state} → {self.to_state}" if self.from_state else self.to_state
        return "; ".join(values) if values else states


def _shown(value) -> str:
    return "none" if value is None else str(value)


class NoticeQuerySet(models.QuerySet):
    def open(self):
        """Notices whose episode is still going on (the condition held at the last check)."""
        return self.filter(resolved_at__isnull=True)

    def unread_by(self, user):
        """Those `user` still has to read: not acknowledged for the team, not dismissed by them."""
        return self.filter(acknowledged_at__isnull=True).exclude(dismissals__user=user)


class Notice(models.Model):
    """A message to a team about its work (an idle job, a memory leak...), one per episode.

    `key` names the episode's subject ("idle:request:42"); while a notice with that key is open
    (resolved_at null) no second one is raised. A member dismisses it for themselves (a
    NoticeDismissal); a team admin acknowledges it for the whole team (`acknowledged_at`, `_by`), and it
    leaves every member's list. The check resolves it when the condition ends, so a later episode gets
    a notice of its own.
    """

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="notices")
    kind = models.CharField(max_length=32, choices=NoticeKind.choices)
    key = models.CharField(max_length=100)
    text = models.CharField(max_length=500)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    acknowledged_at = models.DateTimeField(
        null=True, blank=True, help_text="When a team admin acknowledged it for the whole team."
    )
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = NoticeQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "acknowledged_at", "created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "key"],
                condition=models.Q(resolved_at__isnull=True),
                name="notice_one_open_episode",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.text}"


class NoticeDismissal(models.Model):
    """One member has read a notice and put it away: it leaves their lists only (at most one per user)."""

    notice = models.ForeignKey(Notice, on_delete=models.CASCADE, related_name="dismissals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    dismissed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["notice", "user"], name="notice_dismissed_once_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} dismissed {self.notice}"
