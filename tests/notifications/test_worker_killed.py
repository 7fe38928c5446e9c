"""A real Celery worker on the Redis broker and the PostgreSQL test database, SIGKILLed while a webhook
receiver keeps it waiting mid-delivery, then started again: every event reaches the receiver, which
counts each once by its id, and every delivery ends delivered."""

import os
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from notifications.choices import DeliveryState
from notifications.models import Delivery
from portal.celery import app
from scheduler_app.services.agents import report_started
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 4
TIMEOUT_S = 3  # the worker's NOTIFICATION_TIMEOUT_S: its claims run out 15 s after it


def start_worker(tmp_path, name: str) -> subprocess.Popen:
    """`celery worker` as production runs it (one process: the solo pool, so SIGKILL kills the sender
    itself), on this test's database and broker; in its own process group."""
    url = urllib.parse.urlsplit(os.environ["DATABASE_URL"])._replace(
        path=f"/{connection.settings_dict['NAME']}"
    )
    env = os.environ | {
        "DATABASE_URL": url.geturl(),
        "REDIS_URL": settings.REDIS_URL,
        "NOTIFICATION_TIMEOUT_S": str(TIMEOUT_S),
        "NOTIFICATION_ALLOWED_PRIVATE_HOSTS": "127.0.0.1",
        "PORTAL_VAR_DIR": str(tmp_path / "var"),
    }
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115  (the worker writes it until it ends)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool",
            "solo",
            "-l",
            "info",
            "-n",
            f"{name}@%h",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(worker: subprocess.Popen, sig=signal.SIGKILL) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, sig)
        worker.wait(timeout=30)


@pytest.fixture
def workers(tmp_path):
    started = []

    def start(name):
        started.append(start_worker(tmp_path, name))
        return started[-1]

    yield start
    for worker in started:
        stop(worker)


def test_a_worker_killed_mid_delivery_leaves_every_event_counted_once(
    transactional_db, webhook, receiver, place, node, workers, tmp_path
):
    app.control.purge()  # nothing left on this broker by earlier tests
    receiver.delay_s = 60  # the first delivery keeps the worker waiting until it is killed
    for index in range(EVENTS):
        report_started(node, place("python train.py", card=index % 2, gpu_milli=125).pk)  # a task each
    ids = {str(pk) for pk in Delivery.objects.values_list("pk", flat=True)}
    assert len(ids) == EVENTS

    first = workers("first")
    wait_until(lambda: receiver.arrivals, timeout_s=60, what="the worker sending its first delivery")
    stop(first)  # SIGKILL: mid-delivery, before it could record the answer
    in_flight = receiver.arrivals[0]["id"]
    receiver.delay_s = 0
    assert Delivery.objects.get(pk=in_flight).state == DeliveryState.PENDING

    workers("second")

    def all_delivered() -> bool:
        # What beat does every NOTIFICATION_SCAN_INTERVAL_S: the scan sends the delivery whose claim ran
        # out (its task message died with the first worker).
        app.send_task("notifications.deliver_due")
        return not Delivery.objects.exclude(state=DeliveryState.DELIVERED).exists()

    wait_until(all_delivered, timeout_s=90, step_s=1, what="every delivery delivered")
    assert receiver.events_counted() == ids  # each event counted once by its id
    assert all(a["verified"] for a in receiver.arrivals)
    arrivals_of = [a["id"] for a in receiver.arrivals]
    assert arrivals_of.count(in_flight) == 2  # sent again after the kill, with the same id
    assert len(arrivals_of) == EVENTS + 1
