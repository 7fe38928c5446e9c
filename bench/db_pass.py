"""How long one database scheduling pass takes: 1,000 pending requests on a 1,000-GPU cluster.

    python -m bench.db_pass [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench] [--runs 3]

Builds a scratch PostgreSQL database (created if missing, emptied each run), 125
nodes of 8 A100s, and 1,000 pending requests whose shapes are drawn (seeded) from
the Alibaba trace's GPU pods; then times `run_scheduling_pass()` end to end:
loading, the pure core and applying its decisions in one transaction.
Target: at most 5 s. Prints the median and every run.
"""

import argparse
import random
import statistics
import time

from bench.scratch_db import migrated_django

NODES, GPUS_PER_NODE, REQUESTS = 125, 8, 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/gpu_portal_bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    migrated_django(args.database_url)
    timings = []
    for run in range(args.runs):
        _reset_and_seed(random.Random(args.seed + run))
        timings.append(_timed_pass())
        print(
            f"run {run + 1}: {timings[-1]['seconds']:.2f} s, started {timings[-1]['started']}, "
            f"waiting {timings[-1]['waiting']}"
        )
    median = statistics.median(t["seconds"] for t in timings)
    print(
        f"median pass time: {median:.2f} s for {REQUESTS} pending requests on {NODES * GPUS_PER_NODE} GPUs "
        f"(target <= 5 s)"
    )


def _reset_and_seed(rng: random.Random) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.trace import load_pods
    from scheduler_app.choices import CapacityType
    from scheduler_app.models import Pool
    from scheduler_app.services.inventory import create_pool, register_node
    from scheduler_app.services.requests import submit_request
    from teams.models import Membership, Team

    with connection.cursor() as cursor:
        tables = [
            "scheduler_app_allocation",
            "scheduler_app_event",
            "scheduler_app_gpurequest",
            "scheduler_app_gpu",
            "scheduler_app_node",
            "scheduler_app_teamquota",
            "scheduler_app_pool",
            "portal_membership",
            "portal_team",
            "auth_user",
        ]
        cursor.execute(f"truncate {', '.join(tables)} cascade")
    pool = create_pool(name="a100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    assert Pool.objects.count() == 1
    for n in range(NODES):
        register_node(
            pool=pool,
            name=f"bench-{n:03d}",
            cpu_milli=256_000,
            memory_mib=2_048_000,
            gpus=[
                {"uuid": f"GPU-bench-{n}-{i}", "model": "A100-80GB", "memory_mib": 81920}
                for i in range(GPUS_PER_NODE)
            ],
        )
    teams = [Team.objects.create(name=f"team-{t}", slug=f"team-{t}") for t in range(4)]
    user = get_user_model().objects.create_user("bench")
    for team in teams:
        Membership.objects.create(team=team, user=user)
    shapes = [p for p in load_pods() if p.num_gpus]
    for i in range(REQUESTS):
        shape = rng.choice(shapes)
        submit_request(
            user=user,
            team=teams[i % len(teams)],
            name=f"bench-{i}",
            task_type=rng.choice(["training", "inference"]),
            gpu_milli=shape.gpu_milli,
            num_gpus=shape.num_gpus,
            cpu_milli=min(shape.cpu_milli, 32_000),
            memory_mib=min(shape.memory_mib, 131_072),
            max_duration_s=rng.choice([600, 3600, 6 * 3600]),
        )


def _timed_pass() -> dict:
    from scheduler_app.scheduling import run_scheduling_pass

    begin = time.perf_counter()
    result = run_scheduling_pass()
    return {"seconds": time.perf_counter() - begin, "started": result.started, "waiting": result.waiting}


if __name__ == "__main__":
    main()
