"""How long the delivery log is kept: deliveries finished (delivered or given up on) more than
NOTIFICATION_RETENTION_DAYS ago are deleted with their attempts by the notifications scan. Pending ones
stay, however old: they are still to be sent."""

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from notifications.constants import PRUNE_BATCH
from notifications.models import Delivery, DeliveryAttempt


def prune(now: dt.datetime | None = None) -> int:
    """Delete the deliveries past their retention, a batch per transaction; how many were deleted."""
    cutoff = (now or timezone.now()) - dt.timedelta(days=settings.NOTIFICATION_RETENTION_DAYS)
    old = Delivery.objects.filter(finished_at__lt=cutoff).values_list("pk", flat=True)
    deleted = 0
    while batch := list(old[:PRUNE_BATCH]):
        with transaction.atomic():
            DeliveryAttempt.objects.filter(delivery_id__in=batch).delete()
            Delivery.objects.filter(pk__in=batch).delete()
        deleted += len(batch)
    return deleted
