"""The embedded worker runs Celery beat's schedule: each entry at its own interval on an injected clock, a
pass on every wake, and a failing entry holds back neither the others nor the thread."""

import threading
from collections import Counter

import pytest
from django.conf import settings

from scheduler_app.passes.dispatch import (
    OWN_THREADS,
    PASS_ENTRY,
    EmbeddedWorker,
    _registered_tasks,
    embedded_notifications,
    embedded_slurm,
    embedded_ticker,
    embedded_what_if,
    embedded_worker,
)

EMBEDDED_THREADS = [
    embedded_worker,
    embedded_ticker,
    embedded_what_if,
    embedded_slurm,
    embedded_notifications,
]


class Clock:
    """Monotonic seconds that move only when the test moves them."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def calls(monkeypatch):
    """Every beat task replaced by one that records its entry's name (thread-safe: list.append)."""
    made: list[str] = []
    for entry, spec in settings.CELERY_BEAT_SCHEDULE.items():
        monkeypatch.setitem(_registered_tasks(), spec["task"], lambda entry=entry: made.append(entry))
    return made


def test_every_beat_entry_runs_on_exactly_one_embedded_thread():
    run = [entry for worker in EMBEDDED_THREADS for entry in worker.entries]

    assert sorted(run) == sorted(settings.CELERY_BEAT_SCHEDULE)  # none twice (the live tick), none left out
    assert set(OWN_THREADS) == {
        *embedded_ticker.entries,
        *embedded_what_if.entries,
        *embedded_slurm.entries,
        *embedded_notifications.entries,
    }
    assert all(OWN_THREADS.values())  # each says why it is not on the embedded worker
    assert embedded_worker.on_wake == PASS_ENTRY == "scheduling-pass"
    for entry, spec in settings.CELERY_BEAT_SCHEDULE.items():
        assert _registered_tasks()[spec["task"]].name == spec["task"], entry


@pytest.mark.parametrize("worker", EMBEDDED_THREADS, ids=lambda worker: worker.name)
def test_each_entry_runs_at_its_interval_and_only_the_woken_one_on_every_wake(worker, calls):
    clock = Clock()
    under_test = EmbeddedWorker(worker.entries, on_wake=worker.on_wake, clock=clock)
    window_s = 600.0

    step_s = 0.25  # a wake every quarter second (every interval is a multiple of it)
    while clock.now <= window_s:
        under_test.run_due(woken=True)
        clock.now += step_s

    counts = Counter(calls)
    for entry in worker.entries:
        interval_s = float(settings.CELERY_BEAT_SCHEDULE[entry]["schedule"])
        expected = window_s // interval_s + 1 if entry != worker.on_wake else window_s / step_s + 1
        assert counts[entry] == expected, entry
    assert set(counts) == set(worker.entries)


def test_the_spot_feeds_and_the_heartbeat_watchdog_run_at_their_settings_not_every_wake(calls):
    clock = Clock()
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY, clock=clock)
    assert worker.run_due() == list(embedded_worker.entries)  # all at once when it starts

    clock.now = settings.SPOT_FEED_INTERVAL_S - 0.5
    assert worker.run_due(woken=True) == [PASS_ENTRY]
    clock.now = settings.SPOT_FEED_INTERVAL_S
    assert "spot-feeds" in worker.run_due()
    clock.now = settings.NODE_SUSPECT_AFTER_S / 2 - 0.5
    assert "heartbeat-watchdog" not in worker.run_due(woken=True)
    clock.now = settings.NODE_SUSPECT_AFTER_S / 2
    assert "heartbeat-watchdog" in worker.run_due()


def test_a_wake_runs_the_pass_at_once_and_moves_its_next_periodic_run(calls):
    clock = Clock()
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY, clock=clock)
    worker.run_due()
    interval_s = settings.SCHEDULER_INTERVAL_S

    clock.now = interval_s / 2
    assert worker.run_due(woken=True) == [PASS_ENTRY]
    clock.now = interval_s
    assert PASS_ENTRY not in worker.run_due()
    clock.now = interval_s * 1.5
    assert PASS_ENTRY in worker.run_due()


def test_a_failing_entry_holds_back_neither_the_others_nor_its_next_run(calls, monkeypatch):
    def fail():
        calls.append("heartbeat-watchdog")
        raise RuntimeError("the watchdog failed")

    monkeypatch.setitem(_registered_tasks(), "scheduler_app.heartbeat_watchdog", fail)
    clock = Clock()
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY, clock=clock)

    assert worker.run_due() == list(embedded_worker.entries)
    assert calls == list(embedded_worker.entries)  # the watchdog runs first, then every other entry
    clock.now = settings.NODE_SUSPECT_AFTER_S / 2
    assert "heartbeat-watchdog" in worker.run_due()


def test_a_failing_entry_does_not_kill_the_thread_which_still_runs_wakes(calls, monkeypatch):
    passes = threading.Semaphore(0)

    def failing_pass():
        calls.append(PASS_ENTRY)
        passes.release()
        raise RuntimeError("the pass failed")

    monkeypatch.setitem(_registered_tasks(), "scheduler_app.scheduling_pass", failing_pass)
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY, clock=Clock())  # never due again
    worker.start()
    try:
        first = passes.acquire(timeout=10)  # the first round's
        worker.wake()
        second = passes.acquire(timeout=10)  # the wake's, on the same thread
    finally:
        worker.stop()

    assert first and second
    assert Counter(calls)[PASS_ENTRY] == 2
    assert set(calls) == set(embedded_worker.entries)


def test_the_thread_waits_until_the_next_entry_is_due(calls):
    clock = Clock()
    worker = EmbeddedWorker(["spot-feeds", "telemetry-upkeep"], clock=clock)
    assert worker.seconds_to_next() == 0  # due from the start

    worker.run_due()
    clock.now = 4.0

    assert worker.seconds_to_next() == settings.SPOT_FEED_INTERVAL_S - 4.0


def test_an_entry_not_in_the_schedule_is_refused():
    with pytest.raises(ValueError, match="no-such-entry"):
        EmbeddedWorker(["spot-feeds", "no-such-entry"])
    with pytest.raises(ValueError, match="scheduling-pass"):
        EmbeddedWorker(["spot-feeds"], on_wake=PASS_ENTRY)
