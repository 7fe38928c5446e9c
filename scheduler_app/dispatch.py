"""Asking for a scheduling pass soon: a Celery task in production, the in-process worker otherwise."""

import logging
import threading
import time
from collections.abc import Callable
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
# How long the last pass took, in seconds.
LAST_PASS_SECONDS_KEY = "scheduler:last-pass-seconds"
# The earliest time (Unix seconds) the next queued pass is to start: a pass that starts sets it to
# its expected end (the last pass's length stands in for its own) plus as long again, and a pass
# that ends to its end plus as long as it took.
NEXT_PASS_AT_KEY = "scheduler:next-pass-at"


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
    and a busy portal runs at most about one pass a batch instead of one after another. When passes
    take longer than a batch, the next starts once the last has ended and as long again has passed
    (NEXT_PASS_AT_KEY; at most SCHEDULER_INTERVAL_S from now, when the periodic pass comes anyway):
    on a large queue, passes then keep at most about half of one core, and the web processes the rest.

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
        wait_s = round(cache.get(NEXT_PASS_AT_KEY, 0.0) - time.time(), 3)
        countdown = min(max(settings.SCHEDULER_BATCH_S, wait_s), settings.SCHEDULER_INTERVAL_S)
        scheduling_pass.apply_async(countdown=countdown, retry=False)
    except OperationalError as error:
        log.warning("cannot reach the broker to queue a scheduling pass; the periodic pass will: %s", error)
        with suppress(RedisError):  # else the key expires on its own
            cache.delete(PASS_QUEUED_KEY)


def run_what_if_soon(run_id: int) -> None:
    """Run a queued what-if once the transaction commits: a Celery task in production, else the
    embedded what-if worker. Without a broker the run stays queued for the periodic sweep."""

    def hand_over() -> None:
        if not settings.REDIS_URL:
            embedded_what_if.wake()
            return
        from scheduler_app.tasks import what_if

        try:
            what_if.apply_async((run_id,), retry=False)
        except OperationalError as error:
            log.warning(
                "cannot reach the broker to run what-if %s; the periodic sweep will: %s", run_id, error
            )

    transaction.on_commit(hand_over)


def pass_started() -> None:
    """Called by a pass before it reads anything: later changes may queue the next one (see queue_pass)."""
    cache.delete(PASS_QUEUED_KEY)
    with suppress(RedisError):
        expected_s = cache.get(LAST_PASS_SECONDS_KEY, 0.0)
        cache.set(NEXT_PASS_AT_KEY, time.time() + 2 * expected_s, timeout=PASS_QUEUED_TTL_S)


def pass_ended(seconds: float) -> None:
    """Called by a pass when it is done, with how long it took (see queue_pass)."""
    with suppress(RedisError):
        cache.set(LAST_PASS_SECONDS_KEY, round(seconds, 3), timeout=PASS_QUEUED_TTL_S)
        cache.set(NEXT_PASS_AT_KEY, time.time() + seconds, timeout=PASS_QUEUED_TTL_S)


class EmbeddedWorker:
    """The embedded default's background worker: a thread that runs `work` when woken and every
    interval (what Celery beat and workers do in production). By default the heartbeat watchdog and
    a scheduling pass, the spot feeds, and the telemetry upkeep and the metering once each is due."""

    def __init__(
        self,
        interval_s: float,
        work: Callable[[], object] | None = None,
        name: str = "embedded-worker",
        upkeep_interval_s: float | None = None,
    ):
        self.interval_s = interval_s
        self.work = work or self._watchdog_pass_and_upkeep
        self.name = name
        self.upkeep_interval_s = upkeep_interval_s or settings.TELEMETRY_INTERVAL_S
        self._upkeep_due = 0.0
        self._metering_due = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            close_old_connections()
            try:
                self.work()
            except Exception:  # a failed run must not kill the worker; the next one retries
                log.exception("%s failed", self.name)
            finally:
                close_old_connections()
        connections.close_all()

    def _watchdog_pass_and_upkeep(self) -> None:
        from scheduler_app.node_health import check_heartbeats
        from scheduler_app.scheduling import run_scheduling_pass
        from scheduler_app.services.migration import watch_migrations

        try:
            check_heartbeats()
            watch_migrations()
            run_scheduling_pass()
        finally:  # a failed pass does not hold back the spot feeds or the upkeeps
            self._feeds_and_upkeeps()

    def _feeds_and_upkeeps(self) -> None:
        """Every run: the spot feeds move their pools' prices (Celery beat's spot-feeds); once due:
        the telemetry upkeep (then the resize offers, on the rollups it wrote), the expired idempotency
        keys, and the metering."""
        from billing_app.feeds import advance_spot_feeds
        from billing_app.resizing import offer_resizes
        from billing_app.upkeep import metering_upkeep
        from portal.idempotency import forget_expired_keys
        from scheduler_app.upkeep import telemetry_upkeep

        try:
            advance_spot_feeds()
        finally:  # a failed feed does not hold back the upkeeps
            try:
                if time.monotonic() >= self._upkeep_due:
                    self._upkeep_due = time.monotonic() + self.upkeep_interval_s
                    telemetry_upkeep()
                    offer_resizes()
                    forget_expired_keys()
            finally:
                if time.monotonic() >= self._metering_due:
                    self._metering_due = time.monotonic() + settings.METERING_INTERVAL_S
                    metering_upkeep()


def _live_tick() -> None:
    from scheduler_app.live_ticker import tick

    tick()


def _queued_what_ifs() -> None:
    from scheduler_app.services.whatif import run_queued_what_ifs

    run_queued_what_ifs()


embedded_worker = EmbeddedWorker(interval_s=settings.SCHEDULER_INTERVAL_S)
# The live streams' 1 Hz ticker (Celery beat's live-tick in production).
embedded_ticker = EmbeddedWorker(interval_s=1.0, work=_live_tick, name="live-ticker")
# What-if replays (scheduler_app.whatif): a thread of their own, so a long replay never holds back a pass.
embedded_what_if = EmbeddedWorker(interval_s=60.0, work=_queued_what_ifs, name="what-if")
