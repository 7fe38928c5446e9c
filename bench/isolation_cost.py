"""What isolating a job costs at its start: the time from its placement to its first output line, on a
node whose agent isolates (its team's identity, cgroup, bubblewrap's namespaces) and on one started
with --no-isolation, side by side.

The embedded portal (SQLite, its own scheduler) in a scratch directory, with two pools of one
simulated node each, and two real agents (`python -m agent`, rounds every 0.1 s). Jobs of 1/8 of a
card run `date +%s.%N`, alternately on either node; a job's latency is the time its line printed
minus the request's `scheduled_at` (one host, one clock). Both include the agent's wait for its next
round (0.05 s on average), which is the same for both. Needs root (the isolated agent does).

    python -m bench.isolation_cost [--jobs 50]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import requests

from bench.production import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = Path("/var/tmp/gpu-portal-bench-isolation")
MODES = {"isolated": [], "no-isolation": ["--no-isolation"]}
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
credentials = {}
for mode in %(modes)r:
    pool = create_pool(name=mode, gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    node, _ = register_node(pool=pool, name=f"{mode}-node", cpu_milli=64000, memory_mib=262144,
        gpus=[{"uuid": f"GPU-bench-{mode}", "model": "A100-80GB", "memory_mib": 81920}])
    credentials[mode] = issue_agent_credential(node)
token = create_api_token(user, name="bench", expires_at=timezone.now() + dt.timedelta(hours=2))[1]
print(json.dumps({"token": token, "credentials": credentials}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50, help="Jobs per mode (default 50).")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("Run as root: the isolated agent makes identities and cgroups.")
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(mode=0o711)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["PORTAL_VAR_DIR"] = str(SCRATCH / "var")
    env["API_THROTTLE_RATE"] = "100000/min"  # the bench polls each job's log until its line is there
    (SCRATCH / "var").mkdir(mode=0o711)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    made = subprocess.run(
        [*manage, "shell", "-c", SETUP % {"modes": list(MODES)}],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    setup = json.loads(made.stdout.strip().splitlines()[-1])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    processes = [_start([*manage, "serve", "--port", str(port)], env, "portal")]
    try:
        wait_for(lambda: requests.get(f"{url}/healthz/ready", timeout=1).ok)
        for mode, options in MODES.items():
            credential = SCRATCH / f"{mode}.credential"
            credential.write_text(setup["credentials"][mode])
            credential.chmod(0o600)
            processes.append(_start(_agent(url, credential, mode, options), env, f"{mode}-agent"))
        latencies = _measure(url, setup["token"], args.jobs)
    finally:
        for process in reversed(processes):  # the agents first, while the portal still answers them
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    _report(latencies)


def _agent(url: str, credential: Path, mode: str, options: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "agent", "run", "--portal", url, "--credential-file", str(credential),
        "--simulate-cards", str(_cards(mode)), "--interval-s", "0.1", "--grace-s", "1", "--mps", "off",
        "--workdir", str(SCRATCH / "work"), "--home-root", str(SCRATCH / "home"), *options,
    ]  # fmt: skip


def _cards(mode: str) -> Path:
    path = SCRATCH / f"{mode}-cards.json"
    path.write_text(json.dumps([{"uuid": f"GPU-bench-{mode}", "name": "A100-80GB"}]))
    return path


def _start(argv: list[str], env: dict, name: str) -> subprocess.Popen:
    log = (SCRATCH / f"{name}.log").open("w")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _measure(url: str, token: str, jobs: int) -> dict[str, list[float]]:
    """Per mode, each job's seconds from placement to its first output line, in alternating turns."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
    for turn in range(jobs):
        for mode in list(MODES)[turn % 2 :] + list(MODES)[: turn % 2]:
            body = {"name": "probe", "gpu_milli": 125, "command": "date +%s.%N", "pool": mode}
            answer = session.post(f"{url}/api/v1/requests/", json=body, timeout=10)
            answer.raise_for_status()
            request = answer.json()["id"]
            printed = wait_for(
                lambda r=request: session.get(f"{url}/api/v1/requests/{r}/log/").json()["text"]
            )
            placed = session.get(f"{url}/api/v1/requests/{request}/").json()["scheduled_at"]
            latencies[mode].append(float(printed.split()[0]) - datetime.fromisoformat(placed).timestamp())
    return latencies


def _report(latencies: dict[str, list[float]]) -> None:
    medians = {mode: statistics.median(values) for mode, values in latencies.items()}
    for mode, values in latencies.items():
        p95 = statistics.quantiles(values, n=20)[-1]
        median = medians[mode] * 1000
        print(f"{mode:>13}: median {median:6.1f} ms, p95 {p95 * 1000:6.1f} ms ({len(values)} jobs)")
    added = medians["isolated"] - medians["no-isolation"]
    print(f"isolation adds {added * 1000:.1f} ms at the median (target: at most 300 ms)")


if __name__ == "__main__":
    main()
