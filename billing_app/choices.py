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
