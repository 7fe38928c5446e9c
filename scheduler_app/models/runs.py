"""What the last scheduling pass left for the estimates, and operators' what-if replays."""

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler_app.choices import (
    WhatIfStatus,
)


class PassRecord(models.Model):
    """What the last scheduling pass left (one row): the pure core's post-plan state, pickled, for
    estimates; last_event_id is the newest event the pass saw, so later changes can be replayed."""

    ran_at = models.DateTimeField()
    last_event_id = models.BigIntegerField()
    state = models.BinaryField()

    def __str__(self) -> str:
        return f"pass at {self.ran_at:%Y-%m-%d %H:%M:%S}"


class WhatIfRun(models.Model):
    """An operator's what-if replay of the cluster's history (whatif/replay.py), run in the background.

    scenario: the parsed request (JSON, times ISO); progress 0..100; result: replay.run's answer.
    Claimed once (queued -> running, a conditional update), so a repeated task does not run it twice.
    """

    scenario = models.JSONField()
    status = models.CharField(max_length=16, choices=WhatIfStatus.choices, default=WhatIfStatus.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    # When a running run last wrote its progress: a run silent for long lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(progress__lte=100), name="whatifrun_progress_le_100")
        ]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.status})"

    def is_done(self) -> bool:
        return self.status in (WhatIfStatus.SUCCEEDED, WhatIfStatus.FAILED)
