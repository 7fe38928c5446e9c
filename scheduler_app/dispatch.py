"""Asking for a scheduling pass soon: a Celery task in production, the in-process worker otherwise."""

import logging
import threading
import time
from contextlib import suppress

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connections, transaction
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

# Set (SET NX) while a pass is queued and not yet started; the pass clears it first thing, before it
# reads anything, so a change committed after that asks for, and gets, a pass of its own.
PASS_QUEUED_KEY = "scheduler:pass-queued"
# Seconds after which a queued pass that never started (a lost message) stops holding back new ones.
PASS_QUEUED_TTL_S = 30


def schedule_soon() -> None:
    """Request a pass once the current transaction commits (so the pass sees the change)."""
    transaction.on_commit(_wake)


def _wake() -> None:
    if settings.REDIS_URL:
        queue_pass()
    else:
        embedded_worker.wake()


def queue_pass() -> None:
    """Queue one Celery pass, SCHEDULER_BATCH_S from now, unless one is already queued and not started.

    Every change committed before that pass starts is in it, so a burst of submits shares one pass
    and a busy portal runs at most about one pass a batch instead of one after another.

    Redis or the broker being away only logs a warning: the change is committed, and the periodic
    pass (SCHEDULER_INTERVAL_S) schedules it; the caller must not fail or wait for it.
    """
    from scheduler_app.tasks import scheduling_pass

    try:
        if not cache.add(PASS_QUEUED_KEY, 1, timeout=PASS_QUEUED_TTL_S):
            return
    except RedisError as error:
        log.warning("cannot reach Redis to queue a scheduling pass; the periodic pass will: %s", error)
        return
    try:
        scheduling_pass.apply_async(countdown=settings.SCHEDULER_BATCH_S, retry=False)
    except OperationalError as error:
        log.warning("cannot reach the broker to queue a scheduling pass; the periodic pass will: %s", error)
        with suppress(RedisError):  # else the key expires on its own
            cache.delete(PASS_QUEUED_KEY)


def pass_started() -> None:
    """Called by a pass before it reads anything: later changes may queue the next one."""
    cache.delete(PASS_QUEUED_KEY)


class EmbeddedWorker:
    """The embedded default's background worker: a thread that runs the heartbeat watchdog and a
    scheduling pass when woken, and every interval, and the telemetry upkeep once it is due (what
    Celery beat and workers do in production)."""

    def __init__(self, interval_s: float, upkeep_interval_s: float | None = None):
        self.interval_s = interval_s
        self.upkeep_interval_s = upkeep_interval_s or settings.TELEMETRY_INTERVAL_S
        self._upkeep_due = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="embedded-worker", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        from scheduler_app.node_health import check_heartbeats
        from scheduler_app.scheduling import run_scheduling_pass
        from scheduler_app.upkeep import telemetry_upkeep

        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            close_old_connections()
            try:
                check_heartbeats()
                run_scheduling_pass()
            except Exception:  # a failed pass must not kill the worker; the next one retries
                log.exception("scheduling pass failed")
            if time.monotonic() >= self._upkeep_due:
                self._upkeep_due = time.monotonic() + self.upkeep_interval_s
                try:
                    telemetry_upkeep()
                except Exception:  # like a failed pass: logged, and the next upkeep retries
                    log.exception("telemetry upkeep failed")
            close_old_connections()
        connections.close_all()


embedded_worker = EmbeddedWorker(interval_s=settings.SCHEDULER_INTERVAL_S)
