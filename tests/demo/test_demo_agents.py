"""bin/run-portal's demo: `manage.py serve --simulated-agents` runs the real agent for every demo node on
simulated GPUs, so the seeded work runs, logs, and the cards' utilization moves."""

import sqlite3
import time
from pathlib import Path

from gpu_portal_sdk import ResourceManager

from tests.embedded_portal import embedded_portal

# Run inside the demo's database: the heartbeat watchdog, its clock moved past NODE_LOST_AFTER_S (the
# portal stayed down that long), then a token for alice (Vision's admin).
LOSE_EVERY_NODE = """
import datetime as dt
from django.conf import settings
from django.utils import timezone
from scheduler_app.services.node_health import check_heartbeats
later = timezone.now() + dt.timedelta(seconds=settings.NODE_LOST_AFTER_S + settings.NODE_SUSPECT_AFTER_S)
print(check_heartbeats(later)["lost"])
"""
TOKEN = """
import datetime as dt
from django.contrib.auth import get_user_model
from django.utils import timezone
from teams.services import create_api_token
alice = get_user_model().objects.get(username="alice")
print(create_api_token(alice, name="after restart", expires_at=timezone.now() + dt.timedelta(hours=1))[1])
"""


def reader(var_dir: Path):
    def query(sql):
        with sqlite3.connect(var_dir / "portal.sqlite3", timeout=5) as db:
            return db.execute(sql).fetchall()

    return query


def until(check, what: str, timeout_s: float = 60):
    """Poll `check` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.5)
    return value


def test_the_demo_cluster_comes_alive_within_seconds(tmp_path):
    def query(sql):
        with sqlite3.connect(tmp_path / "portal.sqlite3", timeout=5) as db:
            return db.execute(sql).fetchall()

    with embedded_portal(tmp_path, "--simulated-agents"):
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            busy = query("SELECT count(*) FROM scheduler_app_gpusample WHERE gpu_util_percent > 0")[0][0]
            logged = query(
                "SELECT count(*) FROM scheduler_app_logchunk c JOIN scheduler_app_gpurequest r "
                "ON r.id = c.request_id WHERE r.name = 'resnet50-imagenet'"
            )[0][0]
            if busy and logged:
                break
            time.sleep(1)

        assert busy, "no card reported any utilization"
        assert logged, "the seeded running request shipped no output"
        silent = query("SELECT name FROM scheduler_app_node WHERE last_heartbeat_at IS NULL")
        assert silent == []
        serving = query("SELECT state FROM scheduler_app_gpurequest WHERE name = 'bert-serving'")
        assert serving == [("running",)]  # seeded scheduled: its agent started it


def test_a_restart_brings_back_the_demo_nodes_the_watchdog_lost_and_a_new_request_runs(tmp_path):
    query = reader(tmp_path)
    with embedded_portal(tmp_path, "--simulated-agents") as portal:
        silent = "SELECT name FROM scheduler_app_node WHERE last_heartbeat_at IS NULL"
        until(lambda: not query(silent), "every demo node heard from")
    nodes = query("SELECT count(*) FROM scheduler_app_node")[0][0]
    assert int(portal.manage("shell", "-v0", "-c", LOSE_EVERY_NODE)) == nodes
    assert query("SELECT DISTINCT status FROM scheduler_app_node") == [("lost",)]

    with embedded_portal(tmp_path, "--simulated-agents") as portal:
        until(
            lambda: query("SELECT DISTINCT status FROM scheduler_app_node") == [("ready",)],
            "every demo node back in service",
        )
        alice = ResourceManager(portal.url, portal.manage("shell", "-v0", "-c", TOKEN).strip())
        new = alice.request_allocation(
            name="after-restart",
            min_gpu=0.125,
            prefer_spot=False,
            command="python -m agent.demo_job --seconds 1",
            wait=False,
        )
        ran = (
            f"SELECT state FROM scheduler_app_gpurequest WHERE id = {new.id} "
            "AND state IN ('running', 'succeeded')"
        )
        until(lambda: query(ran), "the new request started by its node's agent")

    back = query(
        "SELECT e.actor_label, e.reason FROM scheduler_app_event e JOIN django_content_type t "
        "ON t.id = e.content_type_id "
        "WHERE t.model = 'node' AND e.from_state = 'lost' AND e.to_state = 'ready'"
    )
    assert len(back) == nodes
    assert set(back) == {
        ("demo agents", "its demo agent registered again: demo nodes come back on a restart")
    }
