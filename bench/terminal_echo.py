"""How long a keystroke takes to echo in a browser-style terminal, with many terminals open at once.

The embedded portal (`manage.py serve`: Daphne, SQLite, the in-memory channel layer) in a scratch
directory and a real agent (`python -m agent run` at its default 2 s rounds, simulated cards, unisolated
unless --isolated) with its session tunnel; one running interactive request. N websockets open a
terminal each on it (`ws/requests/<id>/session/`, a login shell on a pseudo-terminal, as the browser's
xterm.js does).
Once every shell is idle (its prompt printed, nothing more for 0.5 s), each terminal types K
keystrokes as a person at a keyboard does, independently of the others: its first key at a random
moment of the first interval, then one after each echo and a pause drawn from an exponential
distribution of mean `--interval-ms` (Poisson typing; seeded). `--lockstep` is the worst case instead:
every terminal sends its key at the same instant, waits for its echo, and sleeps the interval, so 50
keys arrive in one burst each round. A keystroke's latency is from the send of its byte to the first
frame back that holds it (the remote terminal's echo, through portal, agent, PTY, agent and portal).
Prints the median and p95 over every keystroke.

    python -m bench.terminal_echo [--terminals 50] [--keys 100] [--interval-ms 100] [--lockstep]
        [--seed 1] [--isolated]
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests
from gpu_portal_sdk.sessions import open_websocket

from bench.production import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = Path("/var/tmp/gpu-portal-bench-terminal")
IDLE_S = 0.5  # a shell that has written nothing for this long waits at its prompt
SETUP = """
import datetime as dt, json
from django.contrib.auth import get_user_model
from django.utils import timezone
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool, register_node, issue_agent_credential
from teams.choices import Role
from teams.models import Membership, Team
from teams.services import create_api_token
team = Team.objects.create(name="Bench", slug="bench")
user = get_user_model().objects.create_user("bench")
Membership.objects.create(team=team, user=user, role=Role.MEMBER)
pool = create_pool(name="bench", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
node, _ = register_node(pool=pool, name="bench-node", cpu_milli=64000, memory_mib=262144,
    gpus=[{"uuid": "GPU-bench-0", "model": "A100-80GB", "memory_mib": 81920}])
token = create_api_token(user, name="bench", expires_at=timezone.now() + dt.timedelta(hours=2))[1]
print(json.dumps({"token": token, "credential": issue_agent_credential(node)}))
"""


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--terminals", type=int, default=50, help="Terminals open at once (default 50).")
    parser.add_argument("--keys", type=int, default=100, help="Keystrokes per terminal (default 100).")
    parser.add_argument("--interval-ms", type=float, default=100, help="Between a terminal's keystrokes.")
    parser.add_argument("--lockstep", action="store_true", help="All terminals type at the same instants.")
    parser.add_argument("--seed", type=int, default=1, help="Of the typing pauses (default 1).")
    parser.add_argument("--isolated", action="store_true", help="Isolate the agent's jobs (needs root).")
    parser.add_argument("--scratch", type=Path, default=SCRATCH, help="Where the portal's files go.")
    args = parser.parse_args(argv)
    with portal_and_agent(args.scratch, isolated=args.isolated) as (url, setup):
        request = _interactive_request(url, setup["token"])
        latencies = asyncio.run(_measure(url, setup["token"], request, args))
    result = _report(latencies, args)
    print(json.dumps(result))
    return result


@contextlib.contextmanager
def portal_and_agent(scratch: Path, *, isolated: bool = False) -> Iterator[tuple[str, dict]]:
    """The embedded portal (`manage.py serve`) in `scratch`, seeded by SETUP, and a real agent on one
    simulated card with its session tunnel, until the block ends: (the portal's URL, SETUP's answer)."""
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "var").mkdir(mode=0o711, parents=True)
    scratch.chmod(0o711)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["PORTAL_VAR_DIR"] = str(scratch / "var")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "sdk"), str(ROOT)])
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    made = subprocess.run([*manage, "shell", "-c", SETUP], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    setup = json.loads(made.stdout.strip().splitlines()[-1])
    credential = scratch / "credential"
    credential.write_text(setup["credential"])
    credential.chmod(0o600)
    (scratch / "cards.json").write_text(json.dumps([{"uuid": "GPU-bench-0", "name": "A100-80GB"}]))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    processes = [_start([*manage, "serve", "--port", str(port)], env, scratch, "portal")]
    try:
        wait_for(lambda: requests.get(f"{url}/healthz/ready", timeout=1).ok)
        agent = [
            sys.executable, "-m", "agent", "run", "--portal", url, "--credential-file", str(credential),
            "--simulate-cards", str(scratch / "cards.json"), "--mps", "off",
            "--workdir", str(scratch / "work"), "--home-root", str(scratch / "home"),
            *([] if isolated else ["--no-isolation"]),
        ]  # fmt: skip
        processes.append(_start(agent, env, scratch, "agent"))
        yield url, setup
    finally:
        for process in reversed(processes):  # the agent first, while the portal still answers it
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _start(argv: list[str], env: dict, scratch: Path, name: str) -> subprocess.Popen:
    log = (scratch / f"{name}.log").open("w")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _interactive_request(url: str, token: str) -> int:
    """A request with no command (an interactive allocation), once the agent runs it."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    body = {"name": "terminals", "gpu_milli": 125, "pool": "bench", "task_type": "training"}
    answer = session.post(f"{url}/api/v1/requests/", json=body, timeout=10)
    answer.raise_for_status()
    request = answer.json()["id"]
    wait_for(lambda: session.get(f"{url}/api/v1/requests/{request}/").json()["state"] == "running")
    return request


async def _measure(url: str, token: str, request: int, args) -> list[float]:
    """Every keystroke's seconds to its echo, over all the terminals."""
    path = f"ws/requests/{request}/session/"
    sockets = await asyncio.gather(*(open_websocket(url, token, path) for _ in range(args.terminals)))
    try:
        for ws in sockets:
            await ws.send(json.dumps({"type": "open", "kind": "shell", "command": [], "tty": True,
                                      "cols": 120, "rows": 40}))  # fmt: skip
        await asyncio.gather(*(_idle(ws) for ws in sockets))
        seeds = random.Random(args.seed)
        typed = await asyncio.gather(*(_type(ws, args.keys, _pauses(args, seeds)) for ws in sockets))
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return [latency for per_terminal in typed for latency in per_terminal]


async def _idle(ws) -> None:
    """Until the shell has printed something and then nothing for IDLE_S."""
    await ws.recv()
    while True:
        try:
            await asyncio.wait_for(ws.recv(), IDLE_S)
        except TimeoutError:
            return


def _pauses(args, seeds: random.Random) -> Iterator[float]:
    """One terminal's pauses before its keys: the same for all in lockstep, else its own seeded draw."""
    interval_s = args.interval_ms / 1000
    return _lockstep(interval_s) if args.lockstep else _poisson(random.Random(seeds.random()), interval_s)


def _lockstep(interval_s: float) -> Iterator[float]:
    """No wait before the first key, then the interval after each echo."""
    yield 0.0
    yield from itertools.repeat(interval_s)


def _poisson(draw: random.Random, interval_s: float) -> Iterator[float]:
    """A random moment of the first interval, then exponential pauses of mean interval_s."""
    yield draw.uniform(0, interval_s)
    while True:
        yield draw.expovariate(1 / interval_s)


async def _type(ws, keys: int, pauses: Iterator[float]) -> list[float]:
    """Each key after the next pause (from the previous key's echo); its seconds to its echo."""
    latencies = []
    for index in range(keys):
        key = string.ascii_lowercase[index % 26].encode()
        await asyncio.sleep(next(pauses))
        started = time.perf_counter()
        await ws.send(key)
        while not isinstance(frame := await ws.recv(), bytes) or key not in frame:
            if isinstance(frame, str):
                raise RuntimeError(f"the session says: {frame}")
        latencies.append(time.perf_counter() - started)
    return latencies


def _report(latencies: list[float], args) -> dict:
    median = statistics.median(latencies) * 1000
    p95 = statistics.quantiles(latencies, n=20)[-1] * 1000
    typing = "in lockstep" if args.lockstep else "independently"
    print(f"{args.terminals} terminals x {args.keys} keystrokes, typing {typing}: "
          f"echo median {median:.1f} ms, p95 {p95:.1f} ms (target p95 <= 50 ms)")  # fmt: skip
    return {"terminals": args.terminals, "keystrokes": len(latencies), "lockstep": args.lockstep,
            "median_ms": median, "p95_ms": p95}  # fmt: skip


if __name__ == "__main__":
    main()
