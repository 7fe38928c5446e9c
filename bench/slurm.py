"""A Slurm pool against the real daemons: (a) the time from submit to running, beside Slurm's own
submit-to-start for the same jobs and its scheduling interval; (b) many fractional requests placed
into Slurm in one pass.

    sudo .venv/bin/python -m bench.slurm [--requests 30]
                                         [--batch 1000] [--batch-nodes 32] [--batch-cpus 32]
                                         [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_slurm]

Holds the Slurm lock (/tmp/slurm-tests.lock) throughout, on a scratch PostgreSQL database (made
afresh for each part). (a) runs on bin/slurm-test-cluster's default cluster (2 nodes of 4 cards, 8
shards each) with the embedded default's own threads (scheduler_app.passes.dispatch: the worker whose
pass a submit wakes, and the Slurm thread: the sync every SLURM_SYNC_INTERVAL_S, run at once after a
pass that places work on the pool, and follow_starts every SLURM_START_POLL_MS): --requests requests
of one shard, one at a time, each submitted through the portal's service (submit_request) after a
random wait (seeded) that puts it anywhere in the sync's cycle, and watched until RUNNING. Portal:
started_at - created_at of the request; Slurm: start_time - submit_time of its job (slurmrestd's
record, whole seconds). Each request is cancelled once measured. (b) stops
the default cluster, starts one of --batch-nodes nodes (4 cards of 8 shards, --batch-cpus CPUs each)
in its own directory, submits --batch one-shard requests, and times one scheduling pass and the one
sync that submits what it placed; then counts the jobs Slurm accepted, cancels them all, stops that
cluster and starts the default one again.
"""

import argparse
import contextlib
import fcntl
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.scratch_db import arguments, migrated_django, recreate_database

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "bin" / "slurm-test-cluster"
LOCK = "/tmp/slurm-tests.lock"
BATCH_DIR = "/var/tmp/gpu-portal-slurm-bench"
# The batch cluster's ports, clear of the default cluster's (16817; 17001 on).
BATCH_PORTS = {"SLURM_TEST_CTLD_PORT": "16917", "SLURM_TEST_NODE_PORT": "17101"}
ONE_SHARD = 125  # milli-GPU: one of a card's 8 shards
TARGET_ADDED_P95_S = 1.0
POLL_S = 0.01  # how often (a) reads a request's state while it waits for RUNNING


@dataclass(frozen=True)
class Timing:
    """One request: the portal's submit-to-running and its Slurm job's own submit-to-start, seconds."""

    portal_s: float
    slurm_s: float


@dataclass(frozen=True)
class Batch:
    """(b): the pass's and the sync's seconds, requests placed, jobs Slurm accepted (gave an id to)
    and jobs it lists as running right after the sync."""

    requests: int
    pass_s: float
    sync_s: float
    placed: int
    accepted: int
    running: int


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench_slurm")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--batch-nodes", type=int, default=32)
    parser.add_argument("--batch-cpus", type=int, default=32)
    parser.add_argument("--part", choices=("a", "b"), help=argparse.SUPPRESS)  # one part, lock held
    args = parser.parse_args()
    if args.part == "a":
        run_submit_to_running(args)
    elif args.part == "b":
        run_batch(args)
    else:
        with open(LOCK, "w") as lock:
            print(f"waiting for the Slurm lock {LOCK} ...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
            # Each part in a process of its own, on a database of its own: nothing a pass keeps in
            # memory outlives the database it was read from.
            for part in ("a", "b"):
                subprocess.run(
                    [sys.executable, "-m", "bench.slurm", *sys.argv[1:], "--part", part], check=True
                )


def run_submit_to_running(args) -> None:
    cluster = start_cluster()
    print(f"Slurm's sched_interval: {sched_interval(cluster['SLURM_CONF']):g} s", flush=True)
    clear_partition(cluster)
    fresh_database(args.database_url)
    connection, user, team = setup(cluster)
    try:
        report_timings(submit_to_running(connection, user, team, args.requests, random.Random(7)))
    finally:
        clear_partition(cluster)


def run_batch(args) -> None:
    """(b) on its own larger cluster; the default one stopped meanwhile, and started again after."""
    subprocess.run([CLUSTER, "stop"], check=True)
    env = {"SLURM_TEST_NODES": str(args.batch_nodes), "SLURM_TEST_CPUS": str(args.batch_cpus), **BATCH_PORTS}
    try:
        cluster = start_cluster(BATCH_DIR, env)
        fresh_database(args.database_url)
        connection, user, team = setup(cluster)
        batch = one_pass(connection, user, team, args.batch)
        clear_partition(cluster)
        print(
            f"(b) {batch.requests} requests of one shard on {args.batch_nodes} nodes: "
            f"pass {batch.pass_s:.2f} s placed {batch.placed}; sync {batch.sync_s:.2f} s, "
            f"Slurm accepted {batch.accepted} "
            f"({batch.running} running right after); pass + sync {batch.pass_s + batch.sync_s:.2f} s",
            flush=True,
        )
    finally:
        subprocess.run([CLUSTER, "stop", BATCH_DIR], env={**os.environ, **env}, check=False)
        start_cluster()


def start_cluster(directory: str | None = None, env: dict | None = None) -> dict[str, str]:
    """bin/slurm-test-cluster started (idempotent): its SLURM_CONF and SLURM_REST_SOCKET."""
    env = {**os.environ, **(env or {})}
    where = [directory] if directory else []
    subprocess.run([CLUSTER, "start", *where], check=True, env=env, timeout=600)
    shown = subprocess.run([CLUSTER, "env", *where], check=True, env=env, capture_output=True, text=True)
    return dict(line.split("=", 1) for line in shown.stdout.split())


def sched_interval(slurm_conf: str) -> float:
    """Slurm's main scheduling interval in seconds: SchedulerParameters' sched_interval (60 unset)."""
    shown = subprocess.run(
        ["scontrol", "show", "config"],
        env={**os.environ, "SLURM_CONF": slurm_conf},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = re.search(r"^SchedulerParameters\s*=.*\bsched_interval=(\d+)", shown, re.MULTILINE)
    return float(found[1]) if found else 60.0


def clear_partition(cluster: dict[str, str]) -> None:
    """Cancel every job of the partition and wait until Slurm lists none."""
    env = {**os.environ, "SLURM_CONF": cluster["SLURM_CONF"]}
    subprocess.run(["scancel", "--partition=gpu"], env=env, check=True, capture_output=True)  # its retries
    for _ in range(600):
        if not subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.2)
    raise RuntimeError("the partition still lists jobs 120 s after scancel")


def fresh_database(url: str) -> None:
    """An empty, migrated scratch database, Django set up on it in this process."""
    recreate_database(url)
    migrated_django(url)


def setup(cluster: dict[str, str]):
    """A pool "slurm" connected to the cluster's partition gpu (jobs write to a temporary directory),
    a team whose Unix account exists on this host, and its member: (connection, user, team)."""
    from django.contrib.auth import get_user_model

    from agent.isolation.identity import Identities
    from scheduler_app.services.inventory import create_pool
    from slurm_backend.services import connect_pool
    from teams.models import Membership, Team

    users = get_user_model().objects
    operator = users.create_user("bench-operator", is_staff=True, is_superuser=True)
    user = users.create_user("bench")
    team = Team.objects.create(name="Bench", slug="bench")
    Membership.objects.create(team=team, user=user)
    Identities().for_work({"team": team.slug, "unix_account": ""})
    pool = create_pool(name="slurm", gpu_model="fake", capacity_type="on-demand")
    output = tempfile.mkdtemp(prefix="bench-slurm-output-")
    os.chmod(output, 0o1777)  # the jobs write here as the team's account
    connection, problems = connect_pool(
        pool,
        actor=operator,
        url=f"unix:{cluster['SLURM_REST_SOCKET']}",
        partition="gpu",
        output_dir=output,
        card_memory_mib=16384,
    )
    if problems:
        raise RuntimeError(f"connecting the pool: {problems}")
    return connection, user, team


def submit_to_running(connection, user, team, count: int, rng) -> list[Timing]:
    """`count` requests one after another, each timed from its submit to its RUNNING (see the module's
    docstring), beside its Slurm job's own submit-to-start; each cancelled once it runs. The embedded
    default's worker and Slurm threads run meanwhile, as in `manage.py serve`."""
    from scheduler_app.passes.dispatch import embedded_slurm, embedded_worker

    embedded_worker.start()
    embedded_slurm.start()
    try:
        return _timed(connection, user, team, count, rng)
    finally:
        embedded_slurm.stop()
        embedded_worker.stop()


def _timed(connection, user, team, count: int, rng) -> list[Timing]:
    from scheduler_app.choices import RequestState
    from scheduler_app.services.requests import cancel_request
    from slurm_backend.models import SlurmJob
    from slurm_backend.sync import client_for

    client = client_for(connection)
    timings = []
    for index in range(count):
        time.sleep(rng.uniform(0, settings_value("SLURM_SYNC_INTERVAL_S")))
        request = one_shard(connection, user, team, f"bench-{index}")
        deadline = time.monotonic() + 120
        while request.state != RequestState.RUNNING:
            if time.monotonic() > deadline:
                raise RuntimeError(f"request {request.pk} not running after 120 s: {request.state}")
            time.sleep(POLL_S)
            request.refresh_from_db()
        job_id = SlurmJob.objects.get(request=request).job_id
        job = client.job(job_id)
        timings.append(
            Timing(
                portal_s=(request.started_at - request.created_at).total_seconds(),
                slurm_s=float(job["start_time"] - job["submit_time"]),
            )
        )
        cancel_request(request, user=user)  # its job is stopped by the threads' next sync
    deadline = time.monotonic() + 60  # the last jobs' ends read before the threads stop
    while SlurmJob.objects.filter(connection=connection, ended_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the cancelled requests' Slurm jobs still run 60 s on")
        time.sleep(POLL_S)
    return timings


def settings_value(name: str):
    from django.conf import settings

    return getattr(settings, name)


def one_shard(connection, user, team, name: str):
    """A request of one shard (1 CPU, 1,000 MiB) that sleeps, submitted through the portal's service."""
    from scheduler_app.services.requests import submit_request

    return submit_request(
        user=user,
        team=team,
        pool_name=connection.pool.name,
        name=name,
        gpu_milli=ONE_SHARD,
        cpu_milli=1000,
        memory_mib=1000,
        command="sleep 300",
    )


def one_pass(connection, user, team, count: int) -> Batch:
    """`count` one-shard requests pending, then one scheduling pass and one sync, each timed."""
    from scheduler_app.choices import RequestState
    from scheduler_app.models import GpuRequest
    from scheduler_app.passes.run import run_scheduling_pass
    from slurm_backend.models import SlurmJob
    from slurm_backend.sync import client_for, sync_pool

    submitted = [one_shard(connection, user, team, f"batch-{index}").pk for index in range(count)]
    started = time.perf_counter()
    run_scheduling_pass()
    passed = time.perf_counter()
    problems = sync_pool(connection)
    synced = time.perf_counter()
    if problems:
        print(f"the sync's problems: {problems[:300]}", flush=True)
    ids = set(SlurmJob.objects.filter(request__in=submitted).values_list("job_id", flat=True))
    listed = [j for j in client_for(connection).jobs() if j["job_id"] in ids]
    return Batch(
        requests=count,
        pass_s=passed - started,
        sync_s=synced - passed,
        placed=GpuRequest.objects.filter(pk__in=submitted, state=RequestState.SCHEDULED).count(),
        accepted=len(listed),
        running=sum(1 for j in listed if j["job_state"] == "RUNNING"),
    )


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def report_timings(timings: list[Timing]) -> None:
    rows = {
        "portal": [t.portal_s for t in timings],
        "slurm": [t.slurm_s for t in timings],
        "added": [t.portal_s - t.slurm_s for t in timings],
    }
    summary = ", ".join(
        f"{name} median {statistics.median(values):.2f} s p95 {percentile(values, 95):.2f} s"
        for name, values in rows.items()
    )
    over = percentile(rows["portal"], 95) - percentile(rows["slurm"], 95)
    met = "met" if percentile(rows["added"], 95) <= TARGET_ADDED_P95_S else "NOT met"
    print(
        f"(a) sync every {settings_value('SLURM_SYNC_INTERVAL_S')} s, starts followed every "
        f"{settings_value('SLURM_START_POLL_MS')} ms, {len(timings)} requests: {summary}; "
        f"portal p95 - Slurm p95 {over:.2f} s (target on the added p95: {met})",
        flush=True,
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
