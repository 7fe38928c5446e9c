"""Consolidation's plans: running jobs moved at their next checkpoint to make room for a waiting request
the scattered free share cannot hold (scheduler_app/services/consolidation.py owns them)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler_app.models.requests import GpuRequest


class RoomPlan(models.Model):
    """Moves planned to make room for `request` on `node`'s cards `gpus`, due by `ready_by`; open until
    `ended_at`, when `outcome` says how it ended."""

    request = models.ForeignKey(GpuRequest, on_delete=models.CASCADE, related_name="room_plans")
    node = models.CharField(max_length=64)
    gpus = models.JSONField(help_text="The card indices the request goes to on the node.")
    milli = models.PositiveIntegerField()
    gpu_memory_mib = models.PositiveIntegerField()
    ready_by = models.DateTimeField(help_text="By when the last move is due (its job's next checkpoint).")
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["request"], condition=Q(ended_at__isnull=True), name="one_open_room_plan_per_request"
            )
        ]

    def __str__(self) -> str:
        return f"room for request {self.request_id} on {self.node}"


class RoomMove(models.Model):
    """One running job of a plan, moved at its next checkpoint (`moved_at`: when it stopped)."""

    plan = models.ForeignKey(RoomPlan, on_delete=models.CASCADE, related_name="moves")
    request = models.ForeignKey(GpuRequest, on_delete=models.CASCADE, related_name="room_moves")
    moved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["plan", "request"], name="room_move_once_per_plan")]

    def __str__(self) -> str:
        return f"request {self.request_id} moves for {self.plan}"
