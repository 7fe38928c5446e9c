"""Fan-out: 500 websocket clients receiving the 1 Hz live ticks through the Redis channel layer.

    python -m bench.fanout [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_fanout]
                           [--redis-url redis://127.0.0.1:6379/5] [--clients 500] [--gpus 512]
                           [--duration 30]

Recreates its own PostgreSQL database, seeds a pool of --gpus A100s (8 a node), 5 teams of
members with a running request each, and signs the users in (session cookies). Then starts what
README "Running in production" lists (uvicorn with 2 workers, a Celery worker, Celery beat, whose
`live-tick` runs the ticker once a second; DEBUG=0) and opens --clients websockets (asyncio +
`websockets`): 98 % members on their team's stream, 2 % operators on the cluster-wide one. A
thread plays the agents: every second a new reading for every card, so every tick carries a delta
for most cards. For --duration seconds each client notes, per tick frame, the delivery lag: the
time it read the frame minus the tick's `at` (when the ticker started computing it, in the
worker). Prints the lag's median, p95, p99 and max, and the ticks each client got against the
seconds measured. Target: p95 under 1 s.
"""

import asyncio
import datetime as dt
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from bench import production
from bench.load import Processes, _purge_broker
from bench.scratch_db import arguments, card_readings, drop_database, recreate_database, register_a100_nodes

ROOT = Path(__file__).resolve().parents[1]
TEAMS, GPUS_PER_NODE = 5, 8
OPERATOR_SHARE = 0.02
TICK_PREFIX = '{"type":"tick","at":"'


def main() -> int:
    parser = arguments(__doc__, "gpu_portal_bench_fanout")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--duration", type=float, default=30.0)
    args = parser.parse_args()

    logs = ROOT / "bench" / "results" / f"fanout-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = production.portal_env("fanout", args.database_url, args.redis_url, logs)
    os.environ.update(env)
    recreate_database(args.database_url)
    try:
        return _run(args, env, logs)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(args.database_url)


def _run(args, env: dict, logs: Path) -> int:
    import django

    django.setup()
    from django.core.cache import cache
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    sessions, cards = _seed(args.clients, args.gpus)
    connections.close_all()
    _purge_broker(args.redis_url)
    cache.clear()
    with Processes(env, logs) as processes:
        port = processes.start_portal()
        # The agents in a process of their own: their inserts must not hold this process's GIL while the
        # clients read (that would count as delivery lag).
        stop = multiprocessing.get_context("fork").Event()
        agents = multiprocessing.get_context("fork").Process(target=_play_agents, args=(cards, stop))
        agents.start()
        try:
            lags, ticks, connected, seconds, per_tick = asyncio.run(_clients(port, sessions, args.duration))
        finally:
            stop.set()
            agents.join()
    _report(args, lags, ticks, connected, seconds, per_tick)
    return 0


def _seed(clients: int, gpus: int) -> tuple[list[tuple[str, str]], list[int]]:
    """Cards, teams and users; (session key, stream path) per client, and the card ids."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from scheduler_app.choices import CapacityType
    from scheduler_app.models import Gpu
    from scheduler_app.passes.run import run_scheduling_pass
    from scheduler_app.services.inventory import create_pool
    from scheduler_app.services.requests import submit_request
    from teams.models import Membership, Team

    pool = create_pool(name="a100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    register_a100_nodes([pool], gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    users = get_user_model()
    teams = [Team.objects.create(name=f"Team {i}", slug=f"team-{i}") for i in range(TEAMS)]
    operators = max(1, round(clients * OPERATOR_SHARE))
    sessions = []
    for i in range(clients):
        user = users.objects.create_user(f"user-{i:03d}", is_staff=i < operators)
        if i < operators:
            path = "/ws/cluster/"
        else:
            team = teams[i % TEAMS]
            Membership.objects.create(team=team, user=user)
            path = f"/ws/teams/{team.slug}/events/"
            if i < operators + TEAMS * 8:  # a few running requests per team: allocations to stream
                submit_request(user=user, team=team, name=f"job-{i}", task_type="training", gpu_milli=500)
        browser = Client()
        browser.force_login(user)
        sessions.append((browser.cookies["sessionid"].value, path))
    run_scheduling_pass()
    return sessions, list(Gpu.objects.values_list("pk", flat=True))


def _play_agents(cards: list[int], stop) -> None:
    """Every second, one new reading per card (what the agents' batches store)."""
    from django.db import connection
    from django.utils import timezone

    from telemetry.models import GpuSample

    rng = random.Random(7)
    while not stop.is_set():
        now = timezone.now()
        GpuSample.objects.bulk_create(card_readings(cards, now, rng, power_mw=250_000, temperature_c=55))
        stop.wait(max(0.0, 1 - (timezone.now() - now).total_seconds()))
    connection.close()


async def _clients(port: int, sessions: list[tuple[str, str]], duration: float):
    import websockets

    lags: list[float] = []
    per_tick: dict[str, list[float]] = defaultdict(list)
    ticks: list[int] = []
    measuring = asyncio.Event()
    done = asyncio.Event()

    async def client(session: str, path: str):
        async with websockets.connect(
            f"ws://127.0.0.1:{port}{path}",
            additional_headers={"Cookie": f"sessionid={session}", "Origin": f"http://127.0.0.1:{port}"},
            max_size=None,
            open_timeout=60,
        ) as socket:
            got = 0
            closing = asyncio.create_task(_close_when(done, socket))
            async for raw in socket:
                received = time.time()
                # A tick's text starts {"type":"tick","at":"<ISO time>", ...}: read only that much, so the
                # clients' own JSON parsing (500 in one process here) does not count as delivery lag.
                if raw.startswith(TICK_PREFIX) and measuring.is_set():
                    at = raw[len(TICK_PREFIX) : raw.index('"', len(TICK_PREFIX))]
                    lags.append(received - dt.datetime.fromisoformat(at).timestamp())
                    per_tick[at].append(lags[-1])
                    got += 1  # one frame a tick that changed anything
            await closing
            ticks.append(got)

    tasks = []
    for i, (session, path) in enumerate(sessions):
        tasks.append(asyncio.create_task(client(session, path)))
        if i % 50 == 49:
            await asyncio.sleep(0.2)  # connect in waves, as pages opening over a few seconds would
    await asyncio.sleep(5)  # every client connected and past its snapshot
    connected = sum(not t.done() for t in tasks)
    measuring.set()
    started = time.monotonic()
    await asyncio.sleep(duration)
    seconds = time.monotonic() - started
    done.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [r for r in results if isinstance(r, Exception)]
    if failures:
        print(f"{len(failures)} clients failed, e.g. {failures[0]!r}")
    return lags, ticks, connected, seconds, per_tick


async def _close_when(done: asyncio.Event, socket) -> None:
    await done.wait()
    await socket.close()


def _report(args, lags, ticks, connected, seconds, per_tick: dict[str, list[float]]) -> None:
    if not lags:
        print("no tick frames received")
        return
    ordered = sorted(lags)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    print(
        f"{connected}/{args.clients} clients connected, {args.gpus} GPUs, {seconds:.0f} s measured, "
        f"{len(lags)} tick frames read"
    )
    print(
        f"delivery lag: median {statistics.median(lags) * 1000:.0f} ms, p95 {pct(0.95) * 1000:.0f} ms, "
        f"p99 {pct(0.99) * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms (target p95 < 1000 ms)"
    )
    print(
        f"tick frames per client: median {statistics.median(ticks):.0f}, min {min(ticks)} "
        f"(in {seconds:.0f} s at 1 Hz)"
    )

    # Whether a late frame was late for everyone (the tick itself: the worker, Redis) or only for the
    # last clients served (the fan-out through the ASGI processes).
    first = [min(values) for values in per_tick.values()]
    spread = [max(values) - min(values) for values in per_tick.values()]
    print(
        f"per tick: first client's lag median {statistics.median(first) * 1000:.0f} ms, "
        f"max {max(first) * 1000:.0f} ms; first-to-last spread median "
        f"{statistics.median(spread) * 1000:.0f} ms, max {max(spread) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    sys.exit(main())
