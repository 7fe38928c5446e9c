from django.db import models


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack-compatible incoming webhook"


class EventKind(models.TextChoices):
    """What a channel can be told about; each comes from an Event of the log (notifications.kinds)."""

    REQUEST_STARTED = "request.started", "Request started"
    REQUEST_FINISHED = "request.finished", "Request finished"
    REQUEST_FAILED = "request.failed", "Request failed"
    REQUEST_RECLAIMED = "request.reclaimed", "Request reclaimed or preempted"
    REQUEST_MOVED = "request.moved", "Request moved (requeued, with the work lost)"
    BUDGET_THRESHOLD = "budget.threshold", "Budget threshold crossed"
    IDLE_WARNING = "idle.warning", "Idle GPUs warning"
    IDLE_STOPPED = "idle.stopped", "Stopped for being idle"
    CHECKPOINT_MISSED = "checkpoint.missed", "Checkpoint missed"
    TEST = "test", "Test message"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (gave up)"
