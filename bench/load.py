"""Does the portal hold under load? Production processes on loopback, 20 API clients for 60 s.

    python -m bench.load [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_d_load]
                         [--redis-url redis://127.0.0.1:6379/4] [--clients 20] [--duration 60] [--keep]

Drops and recreates its own PostgreSQL database (kept afterwards only with --keep), migrates,
seeds the demo cluster plus 30 nodes x 8 A100s and 20 users in 4 teams with API tokens, then
starts what README "Running in production" lists (uvicorn with 2 workers, a Celery worker,
Celery beat; DEBUG=0) on a free loopback port. Each client thread, with its own token and one
persistent HTTP connection, submits, cancels and releases a mixed stream of shares for the
duration; halfway through, the Celery worker is killed with SIGKILL and started again. After
a few seconds' settling it reads back from the database what must hold (DESIGN rules 1 and 2),
prints a one-screen summary and writes bench/results/load-<time>.json. Exit code 1 when a
count target fails (5xx, open slices of ended requests, over-committed cards, pending requests
left without a reason); the speed target is reported, not enforced.
"""

import contextlib
import datetime as dt
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import production
from bench.cpu_usage import CpuMeter, cpu_seconds, tree_cpu
from bench.scratch_db import arguments, database_name, drop_database, recreate_database, register_a100_nodes

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# Per second, so DRF's throttle history (one timestamp per request in the window) stays short:
# the bench measures the portal, not the throttle.
THROTTLE_RATE = "100000/s"
LOAD_NODES, GPUS_PER_NODE, SPOT_NODES = 30, 8, 10
TEAMS, USERS = 4, 20
SETTLE_S = 5.0
EIGHTHS = [125 * k for k in range(1, 9)]


def main() -> int:
    parser = arguments(__doc__, "gpu_portal_d_load")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/4")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below on kill too

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    logs = RESULTS / f"load-{stamp}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = production.portal_env("load", args.database_url, args.redis_url, logs)
    env["API_THROTTLE_RATE"] = THROTTLE_RATE
    os.environ.update(env)
    recreate_database(args.database_url)
    try:
        return _run(args, env, database_name(args.database_url), logs, stamp)
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(args.database_url)


def _run(args, env: dict, database: str, logs: Path, stamp: str) -> int:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections
    from django.utils import timezone

    from bench import load_report

    call_command("migrate", verbosity=0)
    tokens = _seed()
    connections.close_all()
    _purge_broker(args.redis_url)
    with Processes(env, logs) as processes:
        port = processes.start_portal()
        print(
            f"portal up on 127.0.0.1:{port}; API_THROTTLE_RATE={THROTTLE_RATE} (the bench measures the "
            f"portal, not the throttle); {args.clients} clients for {args.duration:.0f} s"
        )
        meter = CpuMeter(
            {
                **{name: (lambda name=name: processes.cpu(name)) for name in processes.commands},
                "postgres": lambda: load_report.backend_cpu(database),
                "client": lambda: {os.getpid(): cpu_seconds(os.getpid())},
            }
        )
        meter.start()
        load = run_clients(
            port, tokens, args.duration, args.seed, kill=lambda: processes.kill_and_restart("worker")
        )
        cpu_used = meter.stop()
        time.sleep(SETTLE_S)
        now = timezone.now()
        result = {
            "started": stamp,
            "clients": args.clients,
            "duration_s": args.duration,
            "api_throttle_rate": THROTTLE_RATE,
            "scheduler_interval_s": settings.SCHEDULER_INTERVAL_S,
            "worker_killed_at_s": load.killed_at_s,
            **load.summary(),
            "cpu_seconds": cpu_used,
            "web_cpu_ms_per_call": round(cpu_used["web"] * 1000 / max(1, len(load.calls)), 2),
            **load_report.invariants(now, settings.SCHEDULER_INTERVAL_S),
            "requests_by_state": load_report.requests_by_state(),
            "open_db_connections": load_report.open_connections(database),
        }
        connections.close_all()
    counts, speed = load_report.failed_targets(result)
    result["failed_count_targets"], result["missed_speed_targets"] = counts, speed
    path = RESULTS / f"load-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    _print_summary(result, path, logs)
    return 1 if counts else 0


def _seed() -> list[tuple[str, str]]:
    """The demo, 30 more nodes (20 on-demand, 10 spot) and 20 users in 4 teams; (token, team slug) each."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from demo.seed import seed_demo
    from scheduler_app.models import Pool
    from teams.models import Membership, Team
    from teams.services import create_api_token

    seed_demo()
    on_demand, spot = Pool.objects.get(name="a100-80gb"), Pool.objects.get(name="a100-80gb-spot")
    pools = [spot] * SPOT_NODES + [on_demand] * (LOAD_NODES - SPOT_NODES)
    register_a100_nodes(pools, LOAD_NODES, GPUS_PER_NODE, prefix="load")
    teams = [Team.objects.create(name=f"Load {t}", slug=f"load-{t}") for t in range(TEAMS)]
    tokens = []
    expires = timezone.now() + dt.timedelta(days=1)
    for u in range(USERS):
        user = get_user_model().objects.create_user(f"load-{u:02d}")
        team = teams[u % TEAMS]
        Membership.objects.create(team=team, user=user)
        tokens.append((create_api_token(user, name="bench.load", expires_at=expires)[1], team.slug))
    return tokens


def submit_body(rng: random.Random, team: str, n: int) -> dict:
    """One request of the mix: mostly slices in eighths, some 2- and 4-card gangs, a third spot."""
    body = {
        "team": team,
        "name": f"load-{n}",
        "task_type": rng.choice(["training", "inference"]),
        "cpu_milli": rng.choice([1000, 2000, 4000, 8000]),
        "memory_mib": rng.choice([4096, 16384, 32768]),
        "max_duration_s": rng.choice([600, 3600, 4 * 3600]),
    }
    kind = rng.random()
    if kind < 0.10:
        return body | {"gpu_milli": 1000, "num_gpus": rng.choice([2, 4]), "pool": "a100-80gb"}
    body["gpu_milli"] = rng.choice(EIGHTHS)
    if kind < 0.70:
        return body | {"pool": "a100-80gb"}
    spot = {"billing_mode": "spot", "checkpoint_interval_s": 600}
    if kind < 0.85:
        return body | spot | {"pool": "a100-80gb-spot"}
    return body | spot | {"allow_on_demand_fallback": True}


@dataclass
class Load:
    """What the clients saw: (operation, HTTP status or 0 for a transport error, seconds) per call."""

    duration_s: float
    calls: list[tuple[str, int, float]] = field(default_factory=list)
    killed_at_s: float | None = None

    def summary(self) -> dict:
        from bench.load_report import latency_ms

        submits = [(status, s) for op, status, s in self.calls if op == "submit"]
        accepted = sum(1 for status, _ in submits if status == 201)
        by_status: dict[str, int] = {}
        for op, status, _ in self.calls:
            key = f"{op} {status}"
            by_status[key] = by_status.get(key, 0) + 1
        return {
            "calls": len(self.calls),
            "calls_by_status": dict(sorted(by_status.items())),
            "requests_accepted": accepted,
            "server_errors": sum(1 for _, status, _ in self.calls if status >= 500),
            "transport_errors": sum(1 for _, status, _ in self.calls if status == 0),
            "submits_per_s": accepted / self.duration_s,
            "submit_latency_ms": latency_ms([s for status, s in submits if status == 201]),
            "all_latency_ms": latency_ms([s for _, status, s in self.calls if status]),
        }


def run_clients(port: int, tokens: list[tuple[str, str]], duration_s: float, seed: int, kill) -> Load:
    """Each token drives one thread with one persistent connection until the deadline; `kill`
    is called once, halfway."""
    load = Load(duration_s=duration_s)
    start = time.monotonic()
    deadline = start + duration_s
    lock = threading.Lock()

    def client(index: int, token: str, team: str) -> None:
        rng = random.Random(seed * 1000 + index)
        mine: list[int] = []
        calls = []
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        n = 0
        while time.monotonic() < deadline:
            op = rng.choices(["submit", "cancel", "release"], weights=[70, 15, 15])[0] if mine else "submit"
            if op == "submit":
                n += 1
                path, body = "/api/v1/requests/", json.dumps(submit_body(rng, team, index * 100_000 + n))
            else:
                target = mine.pop(rng.randrange(len(mine)) if op == "cancel" else 0)
                path, body = f"/api/v1/requests/{target}/{op}/", ""
            began = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()
                status, payload = 0, b""
            calls.append((op, status, time.perf_counter() - began))
            if op == "submit" and status == 201:
                mine.append(json.loads(payload)["id"])
        conn.close()
        with lock:
            load.calls.extend(calls)

    threads = [
        threading.Thread(target=client, args=(i, token, team), daemon=True)
        for i, (token, team) in enumerate(tokens)
    ]
    for thread in threads:
        thread.start()
    time.sleep(duration_s / 2)
    load.killed_at_s = time.monotonic() - start
    kill()
    for thread in threads:
        thread.join()
    return load


class Processes:
    """The portal's processes, each in its own process group; on exit (also on Ctrl-C or an
    error) each is asked to stop (SIGTERM) and its group is killed after 15 s at most."""

    def __init__(self, env: dict, logs: Path):
        self.env = os.environ | env
        self.logs = logs
        self.running: dict[str, subprocess.Popen] = {}
        self.commands: dict[str, list[str]] = {}
        self.killed_cpu: dict[str, dict[int, float]] = {}  # the last reading of killed processes

    def cpu(self, name: str) -> dict[int, float]:
        """CPU seconds so far of the named process and its children, killed ones included."""
        return self.killed_cpu.get(name, {}) | tree_cpu(self.running[name].pid)

    def start(self, name: str, command: list[str]) -> None:
        self.commands[name] = command
        with open(self.logs / f"{name}.log", "ab") as log:
            self.running[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_portal(self) -> int:
        """Start the portal's processes (production.portal_processes) on a free loopback port; the port
        once the portal answers there."""
        port = production.free_port()
        for name, command in production.portal_processes(port, self.logs).items():
            self.start(name, command)
        _wait_until_up(port)
        return port

    def kill_and_restart(self, name: str) -> None:
        """SIGKILL the whole process group (main process and pool children), as a crashed host would."""
        process = self.running[name]
        self.killed_cpu[name] = self.killed_cpu.get(name, {}) | tree_cpu(process.pid)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self.start(name, self.commands[name])

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for process in self.running.values():
            process.terminate()  # the main process only: it stops its own children (warm shutdown)
        deadline = time.monotonic() + 15
        for process in self.running.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            _signal_group(process, signal.SIGKILL)  # whatever is left of the group, children included
            process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def _purge_broker(redis_url: str) -> None:
    """Drop passes queued by an earlier run (and by seeding) from the Celery queue on this Redis db."""
    import redis

    redis.Redis.from_url(redis_url).delete("celery", "unacked", "unacked_index")


def _wait_until_up(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz/ready")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.3)
    raise SystemExit(f"the portal did not answer on 127.0.0.1:{port}; see the logs")


def _print_summary(result: dict, path: Path, logs: Path) -> None:
    submit, every = result["submit_latency_ms"], result["all_latency_ms"]
    states = ", ".join(f"{k} {v}" for k, v in result["requests_by_state"].items() if v)
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    print(
        f"\n{result['clients']} clients, {result['duration_s']:.0f} s; worker SIGKILLed at "
        f"{result['worker_killed_at_s']:.0f} s and restarted\n"
        f"calls {result['calls']}: {', '.join(f'{k}: {v}' for k, v in result['calls_by_status'].items())}\n"
        f"requests accepted        {result['requests_accepted']}\n"
        f"submits/s                {result['submits_per_s']:.1f}   (target >= 150)\n"
        f"submit latency p50/p95   {fmt(submit['p50'])} / {fmt(submit['p95'])} ms   (target p95 < 250)\n"
        f"all calls p50/p95        {fmt(every['p50'])} / {fmt(every['p95'])} ms\n"
        f"5xx answers              {result['server_errors']}   (target 0)\n"
        f"transport errors         {result['transport_errors']}   (target 0)\n"
        f"open slices, ended reqs  {result['open_slices_of_inactive_requests']}   (target 0)\n"
        f"GPUs over capacity       {result['gpus_over_capacity']}   (target 0)\n"
        f"pending, no reason > 2 passes ({2 * result['scheduler_interval_s']} s)  "
        f"{result['pending_without_reason']}   (target 0)\n"
        f"open DB connections      {result['open_db_connections']}\n"
        f"CPU seconds during load  {', '.join(f'{k} {v:.1f}' for k, v in result['cpu_seconds'].items())}"
        f" ({result['web_cpu_ms_per_call']:.1f} ms of web CPU per call)\n"
        f"requests by state        {states}\n"
    )
    for line in result["failed_count_targets"]:
        print(f"FAILED: {line}")
    for line in result["missed_speed_targets"]:
        print(f"missed: {line}")
    print(f"result: {path.relative_to(ROOT)}; process logs: {logs.relative_to(ROOT)}/")


if __name__ == "__main__":
    sys.exit(main())
