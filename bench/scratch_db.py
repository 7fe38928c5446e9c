"""The benchmarks' own PostgreSQL databases: named by the URL the benchmark is given (its
--database-url), made, emptied and dropped through the server's `postgres` database, and seeded."""

import argparse
import os
import urllib.parse


def arguments(doc: str, database: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as the help, and --database-url, by default the local
    server's database `database`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=f"postgres://postgres@127.0.0.1:5432/{database}")
    return parser


def database_name(url: str) -> str:
    return urllib.parse.urlparse(url).path.lstrip("/")


def create_database(url: str) -> None:
    """Create the database `url` names unless it exists (its data is kept)."""
    with _admin(url) as conn:
        name = database_name(url)
        if not conn.execute("select 1 from pg_database where datname = %s", [name]).fetchone():
            conn.execute(f'create database "{name}"')


def recreate_database(url: str) -> None:
    """An empty database under the name `url` gives, whatever was there."""
    drop_database(url)
    with _admin(url) as conn:
        conn.execute(f'create database "{database_name(url)}"')


def drop_database(url: str) -> None:
    with _admin(url) as conn:
        conn.execute(f'drop database if exists "{database_name(url)}" with (force)')


def migrated_django(url: str) -> None:
    """Set Django up in this process on the (created if missing) database at `url`, migrated, with
    no Redis: the in-process benchmarks measure the database and the core, nothing else."""
    create_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def empty_the_cluster() -> None:
    """Truncate the cluster, its requests, teams and users in the database Django is set up on."""
    from django.db import connection

    tables = [
        "scheduler_app_passrecord",
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
    with connection.cursor() as cursor:
        cursor.execute(f"truncate {', '.join(tables)} cascade")


def _admin(url: str):
    import psycopg

    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def register_a100_nodes(pools, count: int, gpus_per_node: int = 8, prefix: str = "node") -> None:
    """Register `count` identical A100 nodes of `gpus_per_node` cards, round-robin over `pools`, named
    `prefix`-0000 on."""
    from scheduler_app.services.inventory import register_node

    for n in range(count):
        name = f"{prefix}-{n:04d}"
        register_node(
            pool=pools[n % len(pools)],
            name=name,
            cpu_milli=256_000,
            memory_mib=2_048_000,
            gpus=[
                {"uuid": f"GPU-{name}-{i}", "model": "A100-80GB", "memory_mib": 81920}
                for i in range(gpus_per_node)
            ],
        )


def bulk_a100_nodes(pools: list, gpus_per_node: int = 8) -> list:
    """One node of `gpus_per_node` A100s in each of `pools` (bench-0000 on), inserted in bulk rather
    than registered: quick at thousands of nodes. Returns the cards, node by node."""
    from scheduler_app.models import Gpu, Node

    nodes = Node.objects.bulk_create(
        Node(name=f"bench-{n:04d}", pool=pool, cpu_milli=256_000, memory_mib=2_048_000)
        for n, pool in enumerate(pools)
    )
    return Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.name}-{i}", model="A100-80GB", memory_mib=81920)
        for node in nodes
        for i in range(gpus_per_node)
    )


def bench_user_in_teams(count: int = 4):
    """Teams team-0, team-1, ... and the user "bench", a member of each; (user, teams)."""
    from django.contrib.auth import get_user_model

    from teams.models import Membership, Team

    teams = Team.objects.bulk_create(Team(name=f"team-{t}", slug=f"team-{t}") for t in range(count))
    user = get_user_model().objects.create_user("bench")
    Membership.objects.bulk_create(Membership(team=team, user=user) for team in teams)
    return user, teams


def card_readings(cards: list[int], at, rng, *, power_mw: int, temperature_c: int) -> list:
    """One unsaved GpuSample per card at `at`: util and memory used drawn from `rng`."""
    from telemetry.models import GpuSample

    return [
        GpuSample(
            gpu_id=card,
            sampled_at=at,
            gpu_util_percent=rng.randrange(101),
            memory_used_mib=rng.randrange(81920),
            power_mw=power_mw,
            temperature_c=temperature_c,
        )
        for card in cards
    ]
