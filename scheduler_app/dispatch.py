"""Asking for a scheduling pass soon: a Celery task in production, the in-process worker otherwise."""

import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connections, transaction

log = logging.getLogger(__name__)


def schedule_soon() -> None:
    """Request a pass once the current transaction commits (so the pass sees the change)."""
    transaction.on_commit(_wake)


def _wake() -> None:
    if settings.REDIS_URL:
        from scheduler_app.tasks import scheduling_pass

        scheduling_pass.delay()
    else:
        embedded_worker.wake()


class EmbeddedWorker:
    """The embedded default's background worker: a thread that runs the heartbeat watchdog and a
    scheduling pass when woken, and every interval (what Celery beat and workers do in production)."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
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
            finally:
                close_old_connections()
        connections.close_all()


embedded_worker = EmbeddedWorker(interval_s=settings.SCHEDULER_INTERVAL_S)
