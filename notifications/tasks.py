"""Celery tasks of the notifications: thin wrappers over its delivery and retention modules."""

import datetime as dt

from celery import shared_task
from django.utils import timezone

from notifications.choices import DeliveryState
from notifications.delivery import deliver, deliver_due
from notifications.models import Delivery
from notifications.outbox import DELIVER_TASK
from notifications.retention import prune


@shared_task(name=DELIVER_TASK, ignore_result=True, bind=True)
def deliver_task(self, delivery_id: str) -> str | None:
    """Try one delivery; when it is to be tried again, queue this task for its next try (the periodic
    scan sends it too if this message is lost: the claim lets only one of them send)."""
    state = deliver(delivery_id)
    if state == DeliveryState.PENDING:
        due = Delivery.objects.filter(pk=delivery_id).values_list("next_attempt_at", flat=True).first()
        if due is not None:
            wait = max((due - timezone.now()) / dt.timedelta(seconds=1), 0)
            self.apply_async((delivery_id,), countdown=wait, retry=False)
    return state


@shared_task(name="notifications.deliver_due", ignore_result=True)
def deliver_due_task() -> dict[str, int]:
    """The scan: the due deliveries sent, then the log past its retention deleted."""
    return deliver_due() | {"pruned": prune()}
