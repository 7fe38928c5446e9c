"""The production processes as README's "Running in production" table writes them, and the steps
before the first start as its `sh` block does.

The production-mode test and bench.load start exactly these commands, so the README cannot
drift from what is tested; only the address changes (loopback and a free port).
"""

import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path

import requests

README = Path(__file__).resolve().parent.parent / "README.md"


def production_commands() -> dict[str, list[str]]:
    """Process name -> argv, from the README's table under "Running in production"."""
    rows = re.findall(r"^\| ([^|]+?) \| `([^`]+)`", _production_section(), flags=re.MULTILINE)
    return {process: shlex.split(command) for process, command in rows}


def first_start_steps() -> list[list[str]]:
    """The argv of each command in the README's block "Before the first start", in order."""
    block = re.search(r"Before the first start.*?```sh\n(.*?)```", _production_section(), flags=re.DOTALL)
    steps = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    return [argv for argv in steps if argv]


def _production_section() -> str:
    return README.read_text().split("## Running in production", 1)[1]


def command(process_prefix: str, port: int) -> list[str]:
    """The README's command for the process whose name starts with `process_prefix`, on 127.0.0.1:port."""
    (argv,) = [argv for name, argv in production_commands().items() if name.startswith(process_prefix)]
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
    return argv


def portal_processes(port: int, logs: Path) -> dict[str, list[str]]:
    """The portal's processes as the benchmarks start them: web, worker and beat, beat keeping its
    schedule file with the run's logs rather than in the checkout."""
    return {
        "web": command("ASGI server", port),
        "worker": command("Celery worker", port),
        "beat": [*command("Celery beat", port), "--schedule", str(logs / "celerybeat-schedule")],
    }


def portal_env(bench: str, database_url: str, redis_url: str, logs: Path) -> dict[str, str]:
    """The environment a benchmark starts the portal's processes in: production settings (DEBUG off) on
    loopback, its own database and Redis, static files with the run's logs."""
    return {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "0",
        "SECRET_KEY": f"bench-{bench}-" + os.urandom(16).hex(),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "STATIC_ROOT": str(logs / "static"),
        "LOG_LEVEL": "WARNING",
        # the README's commands name `uvicorn` and `celery`: the ones of this Python
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout_s: float = 60.0):
    """`condition()`'s first true answer, asked every 20 ms (a request that fails counts as not yet);
    TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if result := condition():
                return result
        except requests.RequestException:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"not within {timeout_s} s")
