"""Asking for passes in production: one queued pass per burst, and a submit that never fails because
Redis or the broker is away (the request is saved; the periodic pass schedules it)."""

import logging
import time

import pytest
from kombu.exceptions import OperationalError

from scheduler_app import tasks
from scheduler_app.models import GpuRequest
from scheduler_app.passes import dispatch
from scheduler_app.passes.run import PassResult
from scheduler_app.services.requests import submit_request
from tests.portal.test_health import closed_port_url

pytestmark = pytest.mark.django_db

SUBMIT = {"name": "resnet", "task_type": "training", "gpu_milli": 250}


@pytest.fixture
def queued(monkeypatch, settings):
    """Production dispatch with the broker replaced by a list of the passes it was asked to queue."""
    settings.REDIS_URL = settings.REDIS_URL or "redis://counted-by-the-fixture"
    sent = []
    monkeypatch.setattr(tasks.scheduling_pass, "apply_async", lambda *args, **options: sent.append(options))
    return sent


def submit(member, team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return submit_request(user=member, team=team, **SUBMIT)


def test_a_burst_of_submits_queues_one_pass_a_batch_later(
    queued, member, team, settings, django_capture_on_commit_callbacks
):
    settings.SCHEDULER_BATCH_S = 1
    for _ in range(5):
        submit(member, team, django_capture_on_commit_callbacks)

    assert queued == [{"countdown": 1, "retry": False}]


def test_after_a_long_pass_the_next_waits_as_long_as_it_took(
    queued, member, team, monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.SCHEDULER_BATCH_S = 1
    took = []
    monkeypatch.setattr(tasks, "pass_ended", took.append)
    monkeypatch.setattr(tasks, "run_scheduling_pass", lambda: time.sleep(0.05) or PassResult(0, 0, 0, 0))
    tasks.scheduling_pass()
    assert len(took) == 1 and took[0] >= 0.05

    dispatch.pass_ended(3.5)  # what a pass of 3.5 s records as it ends
    submit(member, team, django_capture_on_commit_callbacks)

    [queued_pass] = queued
    assert 3.4 < queued_pass["countdown"] <= 3.5


def test_a_submit_during_a_long_pass_waits_for_its_end_and_as_long_again(
    queued, member, team, settings, django_capture_on_commit_callbacks
):
    settings.SCHEDULER_BATCH_S = 1
    dispatch.pass_ended(2.0)  # the last pass took 2 s: the one starting now is expected to as well
    dispatch.pass_started()
    submit(member, team, django_capture_on_commit_callbacks)

    [queued_pass] = queued
    assert 3.9 < queued_pass["countdown"] <= 4.0


def test_a_pass_is_never_put_off_past_the_periodic_one(
    queued, member, team, settings, django_capture_on_commit_callbacks
):
    settings.SCHEDULER_INTERVAL_S = 10
    dispatch.pass_ended(60.0)
    submit(member, team, django_capture_on_commit_callbacks)

    assert queued == [{"countdown": 10, "retry": False}]


def test_a_submit_during_a_pass_gets_a_pass_after_it(
    queued, member, team, monkeypatch, django_capture_on_commit_callbacks
):
    submit(member, team, django_capture_on_commit_callbacks)
    real_pass = tasks.run_scheduling_pass

    def pass_while_a_submit_arrives():
        submit(member, team, django_capture_on_commit_callbacks)
        return real_pass()

    monkeypatch.setattr(tasks, "run_scheduling_pass", pass_while_a_submit_arrives)
    tasks.scheduling_pass()

    assert len(queued) == 2


def test_broker_away_logs_a_warning_and_the_next_submit_tries_again(
    member, team, monkeypatch, settings, caplog, django_capture_on_commit_callbacks
):
    settings.REDIS_URL = settings.REDIS_URL or "redis://broker-away"
    attempts = []

    def broker_away(*args, **options):
        attempts.append(options)
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.scheduling_pass, "apply_async", broker_away)

    with caplog.at_level(logging.WARNING, logger="scheduler_app.passes.dispatch"):
        submit(member, team, django_capture_on_commit_callbacks)
        submit(member, team, django_capture_on_commit_callbacks)

    assert len(attempts) == 2
    assert GpuRequest.objects.count() == 2
    assert "cannot reach the broker" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_submit_answers_201_and_saves_once_when_redis_is_away(
    api_client, member, make_node, monkeypatch, settings, caplog
):
    make_node()
    away = closed_port_url()
    settings.REDIS_URL = away
    redis_cache = "infra.redis_cache.RedisCache"
    settings.CACHES = {"default": {"BACKEND": redis_cache, "LOCATION": away}}
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "infra.channel_layers.RedisChannelLayer", "CONFIG": {"hosts": [away]}}
    }
    client = api_client(member)

    with caplog.at_level(logging.WARNING):
        answer = client.post("/api/v1/requests/", SUBMIT, format="json")

    assert answer.status_code == 201, answer.content
    assert GpuRequest.objects.count() == 1
    assert "cannot reach Redis to queue a scheduling pass" in caplog.text
    assert "cannot reach Redis for the rate counters; counting in this process only" in caplog.text
    # Live updates leave from a background loop: the submit does not wait for them.
    deadline = time.monotonic() + 10
    while "cannot reach Redis to publish live updates" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "cannot reach Redis to publish live updates" in caplog.text
