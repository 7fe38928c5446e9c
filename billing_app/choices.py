from django.db import models


class ResizeState(models.TextChoices):
    """Where a resize offer stands: offered to the user, accepted (the scheduler applies it at the job's
    next checkpoint), applied by the scheduler, or withdrawn (the condition ended before it was accepted,
    or the job ended)."""

    OFFERED = "offered", "Offered"
    ACCEPTED = "accepted", "Accepted"
    APPLIED = "applied", "Applied"
    WITHDRAWN = "withdrawn", "Withdrawn"


OPEN_RESIZE_STATES = (ResizeState.OFFERED, ResizeState.ACCEPTED)


class BudgetPolicy(models.TextChoices):
    """What a team's budget does at 100 %, as its team admin chose."""

    ALERT_ONLY = "alert_only", "Only alert"
    BLOCK_ON_DEMAND = "block_on_demand", "Block new on-demand requests"
    SWITCH_TO_SPOT = "switch_to_spot", "Switch new requests to spot"
    STOP_RUNNING = "stop_running", "Stop running work after a grace period"
