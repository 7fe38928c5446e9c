from django.db import models


class CapacityType(models.TextChoices):
    ON_DEMAND = "on-demand", "On-demand"
    SPOT = "spot", "Spot"


class BillingMode(models.TextChoices):
    ON_DEMAND = "on-demand", "On-demand"
    SPOT = "spot", "Spot"


class NodeStatus(models.TextChoices):
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    SUSPECT = "suspect", "Suspect (missed heartbeats)"
    LOST = "lost", "Lost"
    RECLAIMED = "reclaimed", "Reclaimed (spot)"


class TaskType(models.TextChoices):
    TRAINING = "training", "Training"
    INFERENCE = "inference", "Inference"


class RequestState(models.TextChoices):
    PENDING = "pending", "Pending"
    SCHEDULED = "scheduled", "Scheduled"
    RUNNING = "running", "Running"
    MIGRATING = "migrating", "Migrating"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"


class WhatIfStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class MigMode(models.TextChoices):
    OFF = "", "Off (whole cards, shared by milli-GPU)"
    FIXED = "fixed", "MIG, fixed layouts (set per card)"
    DYNAMIC = "dynamic", "MIG, dynamic (the scheduler re-partitions idle cards)"
