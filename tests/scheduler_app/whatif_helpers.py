"""A small recorded history for what-if tests: three whole-card jobs of RUN_S seconds, submitted 10 s
apart to a one-card node, so each really waited for the one before (delays 0, 590 and 1180 s)."""

import datetime as dt
from decimal import Decimal

from django.utils import timezone

from billing_app.models import PoolPrice
from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.transitions import transition_requests

RUNNING, SCHEDULED, SUCCEEDED = RequestState.RUNNING, RequestState.SCHEDULED, RequestState.SUCCEEDED
T0 = (timezone.now() - dt.timedelta(days=1)).replace(microsecond=0)
RUN_S = 600


def record_history(team, user, node, pool, usd_per_gpu_hour="4.00") -> dict:
    """Record the three jobs on the node's only card and price its pool; the period around them
    (two hours, as the what-if API takes it)."""
    card = node.gpus.get()
    PoolPrice.objects.create(
        pool=pool, usd_per_gpu_hour=Decimal(usd_per_gpu_hour), effective_from=T0 - dt.timedelta(days=1)
    )
    for i in range(3):
        submitted = T0 + dt.timedelta(seconds=10 * i)
        began, ended = T0 + dt.timedelta(seconds=RUN_S * i), T0 + dt.timedelta(seconds=RUN_S * (i + 1))
        request = GpuRequest.objects.create(
            team=team, user=user, name=f"job-{i}", gpu_milli=1000, created_at=submitted
        )
        placed = place([PlannedStart(request.pk, (Slice(card.pk, 1000, 81920),), "on-demand")], now=began)
        assert placed.started == [request.pk]
        transition_requests(
            [request.pk], RequestState.RUNNING, from_states=[RequestState.SCHEDULED], now=began
        )
        transition_requests(
            [request.pk], RequestState.SUCCEEDED, from_states=[RequestState.RUNNING], now=ended
        )
    return {
        "start": (T0 - dt.timedelta(hours=1)).isoformat(),
        "end": (T0 + dt.timedelta(hours=1)).isoformat(),
    }
