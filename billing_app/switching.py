"""Switching a running request's billing mode: on-demand ↔ spot, billed from the moment of the switch."""

import datetime as dt

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.events import log_event
from billing_app.models import CapacityMove
from infra.conflicts import StateConflict
from scheduler_app.choices import BillingMode, CapacityType
from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.permissions import can_act_on
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.segments import reopen_segments
from teams.permissions import require


def switch_billing_mode(
    request: GpuRequest,
    mode: str,
    *,
    user,
    checkpoint_interval_s: int | None = None,
    now: dt.datetime | None = None,
) -> GpuRequest:
    """Bill `request` as `mode` from now: its open slices close and reopen on the same cards in the new
    mode (so each segment keeps one rate); spot makes them reclaimable. Back to on-demand while on spot
    capacity records a CapacityMove: the scheduler moves it to on-demand capacity at its next checkpoint."""
    require(can_act_on(user, request), "Only members of the request's team can change its billing.")
    if mode not in BillingMode.values:
        raise ValidationError({"billing_mode": f"Choose one of: {', '.join(BillingMode.values)}."})
    now = now or timezone.now()
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update(of=("self",)).get(pk=request.pk)
        if locked.state not in ACTIVE_STATES:
            raise StateConflict(f"Only running work switches billing; this request is {locked.state}.")
        if locked.billing_mode == mode:
            raise ValidationError({"billing_mode": f"The request is already billed {mode}."})
        interval = checkpoint_interval_s or locked.checkpoint_interval_s
        if mode == BillingMode.SPOT and not interval:
            raise ValidationError(
                {"checkpoint_interval_s": "Spot work can be reclaimed: declare a checkpoint interval first."}
            )
        open_slices = list(
            Allocation.objects.committed()
            .filter(request=locked)
            .select_related("gpu__node__pool")
            .order_by("gpu_id")
        )
        # The cards' no-key locks, as place() takes them: no writer of slices runs on them meanwhile.
        list(
            Gpu.objects.select_for_update(no_key=True)
            .filter(pk__in=[a.gpu_id for a in open_slices])
            .order_by("pk")
        )
        # A slice placed at a pass's clock a moment ahead of `now` switches at its own start.
        reopen_segments(locked, open_slices, billing_mode=mode, at=now)
        before = locked.billing_mode
        locked.billing_mode = mode
        locked.checkpoint_interval_s = interval
        locked.save(update_fields=["billing_mode", "checkpoint_interval_s"])
        on_spot_capacity = any(a.gpu.node.pool.is_spot() for a in open_slices)
        reason = f"billing switched from {before} to {mode}"
        if mode == BillingMode.ON_DEMAND and on_spot_capacity:
            CapacityMove.objects.get_or_create(
                request=locked,
                done_at=None,
                defaults={
                    "to_capacity_type": CapacityType.ON_DEMAND,
                    "requested_at": now,
                    "requested_by": user,
                },
            )
            reason += "; it moves to on-demand capacity at its next checkpoint"
        elif mode == BillingMode.SPOT:
            CapacityMove.objects.filter(request=locked, done_at__isnull=True).delete()
        log_event(
            locked,
            "billing_switched",
            from_state=locked.state,
            actor=user,
            reason=reason,
            data={"billing_mode": {"from": before, "to": mode}, "at": now.isoformat()},
        )
    request.billing_mode, request.checkpoint_interval_s = locked.billing_mode, locked.checkpoint_interval_s
    return request
