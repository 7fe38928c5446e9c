"""Asking for a scheduling pass soon (a Celery task in production, the in-process worker otherwise),
and the embedded default's threads that run Celery beat's schedule in-process."""

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress

from celery import Task, current_app
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
# The names scheduler_app.tasks registers its tasks under.
SCHEDULING_PASS_TASK = "scheduler_app.scheduling_pass"
WHAT_IF_TASK = "scheduler_app.what_if"


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
    try:
        if not cache.add(PASS_QUEUED_KEY, 1, timeout=PASS_QUEUED_TTL_S):
            return
    except RedisError as error:
        log.warning("cannot reach Redis to queue a scheduling pass; the periodic pass will: %s", error)
        return
    try:
        wait_s = round(cache.get(NEXT_PASS_AT_KEY, 0.0) - time.time(), 3)
        countdown = min(max(settings.SCHEDULER_BATCH_S, wait_s), settings.SCHEDULER_INTERVAL_S)
        registered_task(SCHEDULING_PASS_TASK).apply_async(countdown=countdown, retry=False)
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
        try:
            registered_task(WHAT_IF_TASK).apply_async((run_id,), retry=False)
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


# Celery beat's entries (settings.CELERY_BEAT_SCHEDULE) that the embedded default runs on threads of
# their own rather than on the embedded worker's, and why. Every other entry runs on the embedded worker.
OWN_THREADS = {
    "live-tick": "the live streams' 1 Hz deltas: a pass or an upkeep running for seconds must not stall them",
    "queued-what-ifs": "a what-if replay may run for minutes and must never hold back a pass",
    "slurm-sync": "every 2 s, and a slurmrestd slow to answer must not hold back a pass",
    "slurm-starts": "every quarter second while Slurm jobs are starting, beside the sync",
    "notification-deliveries": "a webhook slow to answer must not hold back a pass",
}
# The beat entry that syncs each backend's pools (settings.CELERY_BEAT_SCHEDULE), run at once when a
# pass gives them work (sync_backends_soon) rather than at its next interval.
BACKEND_SYNC_ENTRIES = {"slurm": "slurm-sync"}
# The entry a wake (schedule_soon: a submit, a cancel, a release) runs at once on the embedded worker.
PASS_ENTRY = "scheduling-pass"


def registered_task(name: str) -> Task:
    """The Celery task registered under `name`, found by name so that this module, which the services
    import, imports none of the tasks modules (they import the services)."""
    return _registered_tasks()[name]


@functools.cache
def _registered_tasks() -> dict[str, Task]:
    app = current_app._get_current_object()
    app.loader.import_default_modules()  # the tasks modules register their tasks when imported
    return app.tasks


class EmbeddedWorker:
    """The embedded default's stand-in for Celery beat and workers: a thread that runs the named entries
    of settings.CELERY_BEAT_SCHEDULE, each every "schedule" seconds (all at once when it starts), as plain
    calls of the tasks Celery runs, in the schedule's order; and `on_wake`'s entry as soon as woken.

    `clock` is monotonic seconds; the intervals count on it. A failing entry is logged and retried at
    its next interval; it holds back neither the others nor the thread.
    """

    def __init__(
        self,
        entries: Iterable[str],
        on_wake: str | None = None,
        name: str = "embedded-worker",
        clock: Callable[[], float] = time.monotonic,
    ):
        schedule, wanted = settings.CELERY_BEAT_SCHEDULE, set(entries)
        self.entries = tuple(entry for entry in schedule if entry in wanted)
        unknown = wanted - set(self.entries) | ({on_wake} - {None} - wanted)
        if unknown:
            raise ValueError(f"not in CELERY_BEAT_SCHEDULE or not among the entries: {sorted(unknown)}")
        self.intervals_s = {entry: float(schedule[entry]["schedule"]) for entry in self.entries}
        self.on_wake = on_wake
        self.name = name
        self.clock = clock
        self._due = dict.fromkeys(self.entries, -math.inf)
        self._woken = False
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for entry in self.entries:  # an entry whose task is not registered fails here, not in the thread
            self._task(entry)
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run `on_wake`'s entry as soon as the thread can (at once, unless an entry is running)."""
        with self._lock:
            self._woken = True
        self._event.set()

    def stop(self) -> None:
        self._stop.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def run_due(self, woken: bool = False) -> list[str]:
        """Run the entries that are due on `clock` (and `on_wake`'s if woken); returns the ones it ran.

        On the worker's own thread, each entry starts and ends by closing the thread's broken or expired
        database connections; another caller's connections (a test's transaction) are left to it."""
        now = self.clock()
        ran = [e for e in self.entries if now >= self._due[e] or (woken and e == self.on_wake)]
        own_thread = threading.current_thread() is self._thread
        for entry in ran:
            self._due[entry] = now + self.intervals_s[entry]
            if own_thread:
                close_old_connections()
            try:
                self._task(entry)()
            except Exception:  # the others still run, and this one again at its next interval
                log.exception("%s: %s failed", self.name, entry)
            finally:
                if own_thread:
                    close_old_connections()
        return ran

    def seconds_to_next(self) -> float:
        return max(0.0, min(self._due.values()) - self.clock())

    def _task(self, entry: str) -> Callable[[], object]:
        return registered_task(settings.CELERY_BEAT_SCHEDULE[entry]["task"])

    def _run(self) -> None:
        while not self._stop.is_set():
            self._event.wait(self.seconds_to_next())
            self._event.clear()
            # wake() sets the flag before the event: a wake after this read sets the event after the
            # clear above, so the next round runs it; none is lost.
            with self._lock:
                woken, self._woken = self._woken, False
            if self._stop.is_set():
                break
            self.run_due(woken)
        connections.close_all()


embedded_worker = EmbeddedWorker(
    [entry for entry in settings.CELERY_BEAT_SCHEDULE if entry not in OWN_THREADS], on_wake=PASS_ENTRY
)
embedded_ticker = EmbeddedWorker(["live-tick"], name="live-ticker")
embedded_what_if = EmbeddedWorker(["queued-what-ifs"], on_wake="queued-what-ifs", name="what-if")
embedded_slurm = EmbeddedWorker(["slurm-sync", "slurm-starts"], on_wake="slurm-sync", name="slurm-sync")
embedded_notifications = EmbeddedWorker(["notification-deliveries"], name="notifications")
_EMBEDDED_FOR_ENTRY = {"slurm-sync": embedded_slurm}


def sync_backends_soon(backends: Iterable[str]) -> None:
    """Run the syncs of these backends' pools now (a Celery task in production, the embedded thread
    otherwise): a pass just gave them work to submit or to stop, which must not wait for the next
    interval. A broker being away only logs: the periodic sync comes anyway. After the caller's
    transaction commits, so the sync reads what the pass wrote."""
    entries = sorted({BACKEND_SYNC_ENTRIES[b] for b in backends if b in BACKEND_SYNC_ENTRIES})
    if entries:
        transaction.on_commit(functools.partial(_run_now, entries))


def _run_now(entries: list[str]) -> None:
    for entry in entries:
        if not settings.REDIS_URL:
            _EMBEDDED_FOR_ENTRY[entry].wake()
            continue
        try:
            registered_task(settings.CELERY_BEAT_SCHEDULE[entry]["task"]).apply_async(retry=False)
        except OperationalError as error:
            log.warning("cannot reach the broker to run %s now; its periodic run will: %s", entry, error)
