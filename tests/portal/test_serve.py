"""The run command's server, for real: migrate, seed and serve over Daphne, then fetch pages."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def embedded_portal(tmp_path):
    """The embedded default in a scratch var/ dir, whatever this test pass is configured with."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["PORTAL_VAR_DIR"] = str(tmp_path)
    manage = [sys.executable, "manage.py"]
    for args in (["migrate", "--noinput", "-v0"], ["seed_demo"]):
        subprocess.run(manage + args, cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    port = free_port()
    server = subprocess.Popen(
        [*manage, "serve", "--port", str(port)],
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
    yield base
    server.terminate()
    server.wait(timeout=10)


def test_run_command_serves_login_page_and_admin(embedded_portal):
    login = urllib.request.urlopen(f"{embedded_portal}/accounts/login/", timeout=5)
    admin = urllib.request.urlopen(f"{embedded_portal}/admin/login/", timeout=5)
    css = urllib.request.urlopen(f"{embedded_portal}/static/css/portal.css", timeout=5)

    assert login.status == 200 and b"Log in" in login.read()
    assert admin.status == 200 and b"Django administration" in admin.read()
    assert css.status == 200
