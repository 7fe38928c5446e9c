"""The embedded default's in-process worker with the real tasks: a submit wakes it and the request gets
scheduled; its first round runs every entry of the schedule, the upkeeps among them."""

import time

import pytest

from scheduler_app.models import GpuRequest
from scheduler_app.passes.dispatch import PASS_ENTRY, EmbeddedWorker, embedded_worker
from scheduler_app.services.requests import submit_request

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("sqlite_readers_take_no_table_locks"),
]


def test_submit_wakes_the_worker_which_schedules_the_request(team, member, make_node, monkeypatch, settings):
    settings.REDIS_URL = ""
    make_node()
    # A clock that never moves: after the first round, only a wake-up can make it run a pass.
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY, clock=lambda: 0.0)
    monkeypatch.setattr("scheduler_app.passes.dispatch.embedded_worker", worker)
    worker.run_due()  # the first round, here and before the submit
    worker.start()
    try:
        request = submit_request(user=member, team=team, name="woken", task_type="training", gpu_milli=250)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and GpuRequest.objects.get(pk=request.pk).state == "pending":
            time.sleep(0.05)
    finally:
        worker.stop()

    assert GpuRequest.objects.get(pk=request.pk).state == "scheduled"


def test_the_worker_runs_the_telemetry_upkeep_when_due(make_node, monkeypatch, settings):
    import datetime as dt

    from django.utils import timezone

    from telemetry.models import GpuRollup
    from tests.telemetry.telemetry_helpers import plant

    settings.REDIS_URL = ""
    gpu = make_node().gpus.first()
    plant(gpu, timezone.now() - dt.timedelta(minutes=3), [10, 20, 30])

    _first_round_until(GpuRollup.objects.exists, monkeypatch)

    assert sorted(GpuRollup.objects.filter(resolution_s=60).values_list("util_sum", flat=True)) == [
        10,
        20,
        30,
    ]


def test_the_worker_forgets_expired_idempotency_keys_with_its_upkeep(member, monkeypatch, settings):
    import datetime as dt

    from django.utils import timezone

    from infra.models import IdempotencyKey

    settings.REDIS_URL = ""
    old = timezone.now() - dt.timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_S + 1)
    IdempotencyKey.objects.create(user=member, key="old", request_hash="0" * 64, status=201, created_at=old)

    _first_round_until(lambda: not IdempotencyKey.objects.exists(), monkeypatch)

    assert not IdempotencyKey.objects.exists()


def _first_round_until(done, monkeypatch) -> None:
    """Start a worker (its first round runs every entry: all are due from the start) and wait (10 s at
    most) until `done()`."""
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY)
    monkeypatch.setattr("scheduler_app.passes.dispatch.embedded_worker", worker)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not done():
            time.sleep(0.05)
    finally:
        worker.stop()
