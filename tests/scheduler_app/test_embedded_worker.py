"""The embedded default's in-process worker: a submit wakes it and the request gets scheduled."""

import time

import pytest

from scheduler_app.dispatch import EmbeddedWorker
from scheduler_app.models import GpuRequest
from scheduler_app.services.requests import submit_request

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_wakes_the_worker_which_schedules_the_request(team, member, make_node, monkeypatch, settings):
    settings.REDIS_URL = ""
    make_node()
    worker = EmbeddedWorker(interval_s=3600)  # only a wake-up can make it run in time
    monkeypatch.setattr("scheduler_app.dispatch.embedded_worker", worker)
    worker.start()
    try:
        request = submit_request(user=member, team=team, name="woken", task_type="training", gpu_milli=250)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and GpuRequest.objects.get(pk=request.pk).state == "pending":
            time.sleep(0.05)
    finally:
        worker.stop()

    assert GpuRequest.objects.get(pk=request.pk).state == "scheduled"
