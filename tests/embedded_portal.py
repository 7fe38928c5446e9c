"""The embedded default as `bin/run-portal` starts it, in a process of its own: migrate, seed the demo,
then `manage.py serve` (Daphne and the in-process worker) on a free port, with SQLite in a scratch
var/ dir whatever this test pass is configured with."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.production import free_port

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 30


@dataclass(frozen=True)
class EmbeddedPortal:
    url: str
    env: dict[str, str]
    started_at: float = 0.0  # time.monotonic() when `manage.py serve` was started

    def manage(self, *args: str) -> str:
        """Run a manage.py command against this portal's database; its standard output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout


@contextmanager
def embedded_portal(
    var_dir: Path, *serve_args: str, settings: dict[str, str] | None = None
) -> Iterator[EmbeddedPortal]:
    """`manage.py serve *serve_args` (e.g. --simulated-agents) once it answers; stopped afterwards.
    `settings`: environment variables of the portal's own (e.g. a shorter METERING_INTERVAL_S)."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["PORTAL_VAR_DIR"] = str(var_dir)
    env.update(settings or {})
    port = free_port()
    setup = EmbeddedPortal(f"http://127.0.0.1:{port}", env)
    setup.manage("migrate", "--noinput", "-v0")
    setup.manage("seed_demo")
    portal = EmbeddedPortal(setup.url, env, started_at=time.monotonic())
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), *serve_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: stopped whole, whatever happens
    )
    try:
        _wait_until_ready(portal.url, server)
        yield portal
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def _wait_until_ready(url: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"manage.py serve exited with {server.returncode} before it was ready")
        try:
            urllib.request.urlopen(f"{url}/healthz/ready", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"manage.py serve did not answer {url}/healthz/ready within {READY_TIMEOUT_S} s")
