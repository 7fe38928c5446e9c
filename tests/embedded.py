"""The embedded default for real, in a scratch var/ dir: migrate, seed and serve over Daphne."""

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def embedded_portal(var_dir: Path, *serve_args: str):
    """Yields the base URL of `manage.py serve *serve_args` once it answers, whatever this test pass is
    configured with (no DATABASE_URL, no REDIS_URL); stops it afterwards."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["PORTAL_VAR_DIR"] = str(var_dir)
    manage = [sys.executable, "manage.py"]
    for args in (["migrate", "--noinput", "-v0"], ["seed_demo"]):
        subprocess.run(manage + args, cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    port = free_port()
    server = subprocess.Popen(
        [*manage, "serve", "--port", str(port), *serve_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/healthz/ready", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    try:
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
