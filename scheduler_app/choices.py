from django.db import models


class CapacityType(models.TextChoices):
    ON_DEMAND = "on-demand", "On-demand"
    SPOT = "spot", "Spot"


class BillingMode(models.TextChoices):
    ON_DEMAND = "on-demand", "On-demand"
    SPOT = "spot", "Spot"


class Backend(models.TextChoices):
    """Who runs a pool's work on its nodes: the portal's node agent, or a cluster manager the portal
    drives as if it were each node's agent (slurm_backend)."""

    AGENT = "agent", "Node agent"
    SLURM = "slurm", "Slurm (slurmrestd)"


class NodeStatus(models.TextChoices):
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    SUSPECT = "suspect", "Suspect (missed heartbeats)"
    LOST = "lost", "Lost"
    RECLAIMED = "reclaimed", "Reclaimed (spot)"


class IsolationMode(models.TextChoices):
    """How a node's agent runs jobs, as it reported at registration."""

    UNKNOWN = "unknown", "Unknown (an agent that does not report it)"
    ISOLATED = "isolated", "Isolated (each job as its own Unix identity, in its own cgroup)"
    UNISOLATED = "unisolated", "Unisolated (--no-isolation: jobs run as the agent's user)"


class CgroupVersion(models.TextChoices):
    """The cgroup hierarchy a node's agent puts each job in; none: no CPU, memory or pids limits."""

    V2 = "v2", "cgroup v2"
    V1 = "v1", "cgroup v1"
    NONE = "none", "none"


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
    # Ended by its user ("Release GPUs") while it ran: neither a success nor a failure (Slurm's CANCELLED
    # of a running job), whatever status the stopped process exited with.
    RELEASED = "released", "Released"


class SessionKind(models.TextChoices):
    TERMINAL = "terminal", "Browser terminal"
    SHELL = "shell", "Shell (gpu-portal shell)"
    PORT_FORWARD = "port-forward", "Port forward"
    LAB = "lab", "JupyterLab"


class WhatIfStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class MigMode(models.TextChoices):
    OFF = "", "Off (whole cards, shared by milli-GPU)"
    FIXED = "fixed", "MIG, fixed layouts (set per card)"
    DYNAMIC = "dynamic", "MIG, dynamic (the scheduler re-partitions idle cards)"
