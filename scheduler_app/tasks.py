"""Celery tasks: thin wrappers that call one service each. Passes are idempotent (claims under row locks)."""

import time

from celery import shared_task

from scheduler_app.live.ticker import tick
from scheduler_app.passes.dispatch import SCHEDULING_PASS_TASK, WHAT_IF_TASK, pass_ended, pass_started
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.migration import watch_migrations
from scheduler_app.services.node_health import check_heartbeats
from scheduler_app.services.whatif import run_queued_what_ifs, run_what_if


@shared_task(name=SCHEDULING_PASS_TASK, ignore_result=True)
def scheduling_pass() -> dict:
    pass_started()
    began = time.monotonic()
    result = run_scheduling_pass()
    pass_ended(time.monotonic() - began)
    return {"started": result.started, "preempted": result.preempted, "waiting": result.waiting}


@shared_task(name="scheduler_app.heartbeat_watchdog", ignore_result=True)
def heartbeat_watchdog() -> dict:
    return check_heartbeats()


@shared_task(name="scheduler_app.migration_watchdog", ignore_result=True)
def migration_watchdog() -> dict:
    return watch_migrations()


@shared_task(name="scheduler_app.live_tick", ignore_result=True)
def live_tick() -> dict:
    return tick()


@shared_task(name=WHAT_IF_TASK, ignore_result=True)
def what_if(run_id: int) -> bool:
    """Run one queued what-if (claimed once: a repeated message does nothing)."""
    return run_what_if(run_id)


@shared_task(name="scheduler_app.queued_what_ifs", ignore_result=True)
def queued_what_ifs() -> int:
    """Beat's sweep: what-ifs whose message was lost (the broker was away when they were queued)."""
    return run_queued_what_ifs()
