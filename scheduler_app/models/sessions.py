"""Interactive sessions inside a running allocation: a terminal, a command or a forwarded port, opened
through the portal and relayed to the node's agent (scheduler_app/sessions/)."""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from scheduler_app.choices import SessionKind


class InteractiveSession(models.Model):
    """One session: who opened what on which request, when, and how it ended. `key` names its relay
    groups and the agent's connection; byte counts are what went each way through the relay."""

    key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    request = models.ForeignKey("scheduler_app.GpuRequest", on_delete=models.CASCADE, related_name="sessions")
    node = models.ForeignKey("scheduler_app.Node", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=16, choices=SessionKind.choices)
    command = models.JSONField(default=list, blank=True)  # argv of a `shell -- command`; [] a shell
    port = models.PositiveIntegerField(null=True, blank=True)  # port-forward's port in the allocation
    opened_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    bytes_in = models.BigIntegerField(default=0)  # from the user to the allocation
    bytes_out = models.BigIntegerField(default=0)  # from the allocation to the user
    close_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [models.Index(fields=["request", "-opened_at"])]

    def __str__(self) -> str:
        return f"{self.kind} session {self.key} on request {self.request_id}"

    @property
    def team_id(self) -> int | None:
        """The event log files the session's events under its request's team (audit.build_event)."""
        return self.request.team_id
