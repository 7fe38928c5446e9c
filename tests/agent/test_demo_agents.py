"""bin/run-portal's demo: `manage.py serve --simulated-agents` runs the real agent for every demo node on
simulated GPUs, so the seeded work runs, logs, and the cards' utilization moves."""

import sqlite3
import time

from tests.embedded_portal import embedded_portal


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
