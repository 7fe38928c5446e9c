"""What-if runs: an operator starts one (checked, queued, handed to the background); a worker claims it
once and runs it (scheduler_app.whatif.replay), keeping its progress (0..100) on the row as it goes."""

import datetime as dt
import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import WhatIfStatus
from scheduler_app.models import WhatIfRun
from scheduler_app.passes.dispatch import run_what_if_soon
from scheduler_app.whatif import replay
from teams.permissions import can_operate, require

log = logging.getLogger(__name__)

# A running what-if that wrote no progress for this long lost its worker (a crash, a restart).
STALE_AFTER = dt.timedelta(minutes=15)


def start_what_if(*, actor, data: dict) -> WhatIfRun:
    """Queue a what-if on `data` (see replay.parse_scenario); ValidationError and nothing written when
    the scenario is bad or the period holds no placed request."""
    require(can_operate(actor), "Only platform operators run what-ifs.")
    scenario = replay.parse_scenario(data)
    if not replay.placed_in(scenario).exists():
        raise ValidationError({"start": ["No request was placed in this period: nothing to replay."]})
    with transaction.atomic():
        run = WhatIfRun.objects.create(scenario=replay.scenario_json(scenario), created_by=actor)
        run_what_if_soon(run.pk)
    return run


def run_what_if(run_id: int) -> bool:
    """Claim the queued run and run it to succeeded or failed; False when it was not queued (another
    worker claimed it, or it already ran), so a repeated task does nothing."""
    now = timezone.now()
    claimed = WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.QUEUED).update(
        status=WhatIfStatus.RUNNING, started_at=now, heartbeat_at=now
    )
    if not claimed:
        return False
    scenario = WhatIfRun.objects.values_list("scenario", flat=True).get(pk=run_id)
    try:
        result = replay.run(replay.parse_scenario(scenario), progress=_keeper(run_id))
    except ValidationError as error:  # the cluster changed since it was queued (a pool went away)
        _finish(run_id, WhatIfStatus.FAILED, error=" ".join(error.messages))
    except Exception as error:  # a failed run says so on its row; the worker goes on
        log.exception("what-if %s failed", run_id)
        _finish(run_id, WhatIfStatus.FAILED, error=f"The replay failed: {error}")
    else:
        _finish(run_id, WhatIfStatus.SUCCEEDED, result=result)
    return True


def run_queued_what_ifs() -> int:
    """Fail the runs whose worker died, then run every queued what-if, oldest first (the embedded
    worker's and Celery beat's sweep)."""
    WhatIfRun.objects.filter(
        status=WhatIfStatus.RUNNING, heartbeat_at__lt=timezone.now() - STALE_AFTER
    ).update(
        status=WhatIfStatus.FAILED,
        error="The worker running this what-if stopped; start it again.",
        finished_at=timezone.now(),
    )
    queued = WhatIfRun.objects.filter(status=WhatIfStatus.QUEUED).order_by("created_at", "id")
    return sum(run_what_if(pk) for pk in queued.values_list("pk", flat=True))


def _keeper(run_id: int):
    """A progress callback that writes each new whole percent (below 100) to the running row."""
    last = [0]

    def keep(fraction: float) -> None:
        percent = min(99, int(fraction * 100))
        if percent > last[0]:
            last[0] = percent
            WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.RUNNING).update(
                progress=percent, heartbeat_at=timezone.now()
            )

    return keep


def _finish(run_id: int, status: str, *, result: dict | None = None, error: str = "") -> None:
    WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.RUNNING).update(
        status=status,
        progress=100,
        result=result,
        error=error[:2000],
        finished_at=timezone.now(),
    )
