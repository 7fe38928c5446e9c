"""Fixtures of the fault-injection tests: the after-fault check, and real agents in processes of their own."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.parse
from contextlib import suppress
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from agent.jobs import running_requests
from billing_app.invariants import settled_by
from billing_app.metering import meter_usage
from scheduler_app.rules.invariants import after_fault
from scheduler_app.services.inventory import issue_agent_credential

REPO = Path(__file__).resolve().parents[2]


def running_here() -> dict[int, set[str]]:
    """What this host runs for this test's portal (its checkpoints live under the test's folder)."""
    return running_requests(settings.CHECKPOINT_ROOT)


def settle_and_check(*, accepted=()) -> None:
    """After the fault: meter everything as a metering run after the last slice settled would, then
    every rule of scheduler_app.rules.invariants.after_fault must hold for what the host runs now."""
    later = settled_by()
    meter_usage(later)
    broken = after_fault(accepted=accepted, running=running_here(), now=later)
    assert not broken, "after the fault:\n" + "\n".join(broken)


def killed_mid(code: str, *, timeout_s: float = 60) -> str:
    """Run `code` (Django set up, on this test's database) in a process of its own until it prints
    MID, then SIGKILL it: a real kill, its open transaction left for PostgreSQL to roll back. Returns
    what it printed."""
    database = urllib.parse.urlsplit(os.environ["DATABASE_URL"])._replace(
        path=f"/{connection.settings_dict['NAME']}"
    )
    env = os.environ | {"DATABASE_URL": database.geturl(), "DJANGO_SETTINGS_MODULE": "portal.settings"}
    script = f"import django\ndjango.setup()\n{textwrap.dedent(code)}"
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    seen = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (line := process.stdout.readline()):
            seen.append(line)
            if line.strip() == "MID":
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                return "".join(seen)
        pytest.fail(f"the process never reached MID:\n{''.join(seen)}")
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def agent_process(live_server, agent_files, tmp_path):
    """agent_process(node) -> a `python -m agent run` process for the node on simulated cards of its
    UUIDs, in a process group of its own; whatever is left of it is killed at the end of the test."""
    started = []

    def start(node):
        cards = tmp_path / f"{node.name}-cards.json"
        cards.write_text(
            json.dumps(
                [{"uuid": g.uuid, "name": g.model, "memory_mib": g.memory_mib} for g in node.gpus.all()]
            )
        )
        secret = tmp_path / f"{node.name}-credential"
        if not secret.exists():  # a restarted agent keeps the node's credential
            secret.write_text(issue_agent_credential(node))
        argv = [
            sys.executable, "-m", "agent", "run", "--portal", live_server.url,
            "--credential-file", str(secret),
            "--simulate-cards", str(cards), "--interval-s", "0.2", "--grace-s", "1", "--mps", "off",
            "--no-isolation", "--workdir", str(tmp_path / "work"), "--job-env", f"PYTHONPATH={REPO}",
        ]  # fmt: skip
        log = (tmp_path / f"{node.name}-agent.log").open("a")
        process = subprocess.Popen(
            argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        started.append(process)
        return process

    yield start
    for process in started:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(autouse=True)
def _no_job_outlives_the_test(agent_files):
    """Jobs run in sessions of their own, so a killed agent leaves them running: kill what is left."""
    yield
    for sessions in running_here().values():
        for session in sessions:
            with suppress(ProcessLookupError):
                os.killpg(int(session.split()[1]), signal.SIGKILL)
