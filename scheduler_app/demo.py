"""The demo cluster of the embedded default: pools, nodes, teams, users and a few requests.

Idempotent: running it again keeps what is there and adds only what is missing.
"""

import logging
import uuid
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from billing_app.feeds import set_spot_feed
from billing_app.models import Budget, FeedKind
from billing_app.public_prices import PriceFileError, read_public_prices
from billing_app.services import default_public_prices_path, price_pools_from_public
from scheduler_app.choices import BillingMode, CapacityType, RequestState, TaskType
from scheduler_app.models import GpuRequest, Node, Pool, TeamQuota
from scheduler_app.services.inventory import create_pool, register_node
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_request
from teams.choices import Role
from teams.models import Membership, Team

logger = logging.getLogger(__name__)

DEMO_PASSWORD = "gpu-portal-demo"
# What the demo's requests run: a stand-in workload the simulated GPUs see (agent/demo_job.py).
DEMO_JOB = "python -m agent.demo_job"
GIB = 1024
# The demo spot pool replays a recorded day of spot prices every second: the recorded A100 series
# change only every few days, and the price should move within the demo's first minute.
DEMO_REPLAY_SPEEDUP = 24 * 3600

DEMO_VISION_BUDGET_USD = Decimal("0.25")
POOLS = [
    # name, GPU model, capacity, GPU memory MiB, nodes, GPUs per node, CPU milli, host memory MiB
    ("a100-80gb", "A100-80GB", CapacityType.ON_DEMAND, 80 * GIB, 3, 8, 128_000, 1024 * GIB),
    ("a100-80gb-spot", "A100-80GB", CapacityType.SPOT, 80 * GIB, 2, 8, 128_000, 1024 * GIB),
    ("rtx4090", "RTX-4090", CapacityType.ON_DEMAND, 24 * GIB, 2, 4, 32_000, 128 * GIB),
]

USERS = [
    # username, team, role (None: platform operator)
    ("ops", None, None),
    ("alice", "Vision", Role.TEAM_ADMIN),
    ("bob", "Vision", Role.MEMBER),
    ("carol", "Language", Role.TEAM_ADMIN),
    ("dave", "Language", Role.MEMBER),
]

QUOTAS = {("Vision", "a100-80gb"): 8000, ("Language", "a100-80gb"): 8000, ("Vision", "rtx4090"): 4000}


def gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node_name}.gpu{index}.demo')}"


@transaction.atomic
def seed_demo(public_prices: Path | str | None = None) -> list[str]:
    """Create what is missing; returns the usernames, all with DEMO_PASSWORD.

    Unpriced pools get the median public price of their GPU model and capacity type from
    `public_prices` (default ../shared/prices/cloud_gpu_prices.csv) when that file is there.
    """
    for name, model, capacity, gpu_mib, node_count, gpus_per_node, cpu, mem in POOLS:
        pool = Pool.objects.filter(name=name).first() or create_pool(
            name=name, gpu_model=model, capacity_type=capacity, description=f"{model} {capacity}"
        )
        for n in range(1, node_count + 1):
            node_name = f"{name}-node-{n:02d}"
            if not Node.objects.filter(name=node_name).exists():
                gpus = [
                    {
                        "uuid": gpu_uuid(node_name, i),
                        "model": model,
                        "memory_mib": gpu_mib,
                        "mig_capable": "A100" in model,
                    }
                    for i in range(gpus_per_node)
                ]
                register_node(pool=pool, name=node_name, cpu_milli=cpu, memory_mib=mem, gpus=gpus)

    users = {}
    for username, team_name, role in USERS:
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.is_staff = user.is_superuser = role is None
            user.save()
        users[username] = user
        if team_name:
            team, _ = Team.objects.get_or_create(name=team_name, defaults={"slug": team_name.lower()})
            Membership.objects.get_or_create(team=team, user=user, defaults={"role": role})
    for (team_name, pool_name), milli in QUOTAS.items():
        TeamQuota.objects.get_or_create(
            team=Team.objects.get(name=team_name),
            pool=Pool.objects.get(name=pool_name),
            defaults={"guaranteed_milli": milli},
        )
    # Small enough that the demo's own work crosses 50 % and 80 % within minutes (alerts on the team's page).
    Budget.objects.get_or_create(
        team=Team.objects.get(name="Vision"),
        user=None,
        defaults={"monthly_usd": DEMO_VISION_BUDGET_USD, "thresholds_percent": [50, 80, 100]},
    )
    if not GpuRequest.objects.exists():
        _seed_requests(users)
    _seed_prices(Path(public_prices) if public_prices else default_public_prices_path())
    _seed_spot_feeds()
    return [username for username, _, _ in USERS]


def _seed_prices(path: Path) -> None:
    """Price the pools that have no price yet from the public prices; without the file (a fresh clone
    has no ../shared) they stay unpriced: the demo never makes a price up."""
    if not path.exists():
        logger.info("No public price file at %s: the demo pools stay unpriced.", path)
        return
    try:
        public = read_public_prices(path)
    except PriceFileError as error:
        logger.warning("%s The demo pools stay unpriced.", error)
        return
    price_pools_from_public(public, only_unpriced=True, actor_name="seed_demo")


def _seed_spot_feeds() -> None:
    """Spot pools without a feed replay the recorded GCP spot history of their GPU model, a recorded
    day every second, so their prices visibly move; without that file, the occupancy feed."""
    for pool in Pool.objects.filter(capacity_type=CapacityType.SPOT, spot_feed__isnull=True):
        try:
            set_spot_feed(
                pool,
                actor=None,
                kind=FeedKind.REPLAY,
                replay_file="gcp",
                replay_speedup=DEMO_REPLAY_SPEEDUP,
                actor_name="seed_demo",
            )
        except ValidationError:
            set_spot_feed(pool, actor=None, kind=FeedKind.OCCUPANCY, actor_name="seed_demo")


def _seed_requests(users) -> None:
    vision, language = Team.objects.get(name="Vision"), Team.objects.get(name="Language")
    first_a100 = Node.objects.get(name="a100-80gb-node-01").gpus.order_by("index")

    def submit(user, team, **fields):
        return submit_request(user=user, team=team, **fields)

    running = submit(
        users["alice"],
        vision,
        name="resnet50-imagenet",
        task_type=TaskType.TRAINING,
        gpu_milli=500,
        pool_name="a100-80gb",
        max_duration_s=6 * 3600,
        command=f"{DEMO_JOB} --seconds 240",
    )
    allocate(running, [Slice(first_a100[0].id, 500, 40 * GIB)])
    transition_request(running, RequestState.RUNNING, actor_name="agent", reason="container started")

    serving = submit(
        users["bob"],
        vision,
        name="bert-serving",
        task_type=TaskType.INFERENCE,
        gpu_milli=250,
        max_duration_s=24 * 3600,
        command=f"{DEMO_JOB} --seconds 300",
    )
    allocate(serving, [Slice(first_a100[1].id, 250, 20 * GIB)])

    done = submit(
        users["carol"],
        language,
        name="tokenizer-eval",
        task_type=TaskType.INFERENCE,
        gpu_milli=125,
        max_duration_s=1800,
        command=f"{DEMO_JOB} --seconds 30",
    )
    allocate(done, [Slice(first_a100[2].id, 125, 10 * GIB)])
    transition_request(done, RequestState.RUNNING, actor_name="agent", reason="container started")
    transition_request(done, RequestState.SUCCEEDED, actor_name="agent", reason="exit code 0")

    submit(
        users["dave"],
        language,
        name="llama-finetune",
        task_type=TaskType.TRAINING,
        gpu_milli=1000,
        num_gpus=8,
        billing_mode=BillingMode.SPOT,
        allow_on_demand_fallback=True,
        checkpoint_interval_s=900,
        max_duration_s=12 * 3600,
        command=f"{DEMO_JOB} --seconds 120",
    )
    cancelled = submit(
        users["bob"], vision, name="old-experiment", gpu_milli=125, command=f"{DEMO_JOB} --seconds 60"
    )
    transition_request(cancelled, RequestState.CANCELLED, actor=users["bob"], reason="cancelled by user")
