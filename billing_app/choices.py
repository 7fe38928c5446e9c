from django.db import models


class BudgetPolicy(models.TextChoices):
    """What a team's budget does at 100 %, as its team admin chose."""

    ALERT_ONLY = "alert_only", "Only alert"
    BLOCK_ON_DEMAND = "block_on_demand", "Block new on-demand requests"
    SWITCH_TO_SPOT = "switch_to_spot", "Switch new requests to spot"
    STOP_RUNNING = "stop_running", "Stop running work after a grace period"
