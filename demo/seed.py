"""The demo cluster of the embedded default: pools, nodes, teams, users, a week of finished requests
(history.py), a few live requests, prices and the budgets the teams would set.

Idempotent: running it again keeps what is there and adds only what is missing.
"""

import datetime as dt
import logging
import math
import uuid
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from billing_app.budgets import set_budget
from billing_app.feeds import set_spot_feed
from billing_app.metering import segment_costs_usd
from billing_app.models import Budget, FeedKind
from billing_app.public_prices import PriceFileError, read_public_prices
from billing_app.services import default_public_prices_path, price_pools_from_public
from demo.history import history_missing, plan_history
from scheduler_app.choices import BillingMode, CapacityType, RequestState, TaskType
from scheduler_app.models import Allocation, GpuRequest, Node, Pool, TeamQuota
from scheduler_app.services.history import record_past_requests
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

# A team's budget: what its last week cost at today's prices, for a month of such weeks, with a quarter
# more for growth, rounded up to a hundred dollars; so the week's spend is under a fifth of it, and the
# thresholds (50, 80, 100 %) warn about a month that really runs over.
WEEKS_PER_MONTH = Decimal("365.25") / 12 / 7
BUDGET_HEADROOM = Decimal("1.25")
BUDGET_ROUNDING_USD = 100
POOLS = [
    # name, GPU model, capacity, GPU memory MiB, nodes, GPUs per node, CPU milli, host memory MiB, description
    ("a100-80gb", "A100-80GB", CapacityType.ON_DEMAND, 80 * GIB, 3, 8, 128_000, 1024 * GIB, "training"),
    (
        "a100-80gb-spot",
        "A100-80GB",
        CapacityType.SPOT,
        80 * GIB,
        2,
        8,
        128_000,
        1024 * GIB,
        "checkpoint often",
    ),
    (
        "rtx4090",
        "RTX-4090",
        CapacityType.ON_DEMAND,
        24 * GIB,
        2,
        4,
        32_000,
        128 * GIB,
        "inference, small jobs",
    ),
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
    `public_prices` (default ../shared/prices/cloud_gpu_prices.csv) when that file is there, from the
    start of the week of history when it is seeded now (so metering bills that week too).
    """
    now = timezone.now()
    for name, model, capacity, gpu_mib, node_count, gpus_per_node, cpu, mem, description in POOLS:
        pool = Pool.objects.filter(name=name).first() or create_pool(
            name=name, gpu_model=model, capacity_type=capacity, description=description
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
    history = []
    if history_missing(now):
        # Before any request already there, so that no recorded slice meets a live one.
        first = GpuRequest.objects.order_by("created_at").values_list("created_at", flat=True).first()
        history = plan_history(min(now, first or now), DEMO_JOB)
    since = min((past.request.created_at for past in history), default=None)
    _seed_prices(Path(public_prices) if public_prices else default_public_prices_path(), since)
    if not GpuRequest.objects.exists():
        _seed_requests(users)
    record_past_requests(history)
    _seed_budgets(now)
    _seed_spot_feeds()
    return [username for username, _, _ in USERS]


def _seed_prices(path: Path, since: dt.datetime | None) -> None:
    """Price the pools that have no price yet from the public prices, from `since` (the history's start)
    or now; without the file (a fresh clone has no ../shared) they stay unpriced: the demo never makes a
    price up."""
    if not path.exists():
        logger.info("No public price file at %s: the demo pools stay unpriced.", path)
        return
    try:
        public = read_public_prices(path)
    except PriceFileError as error:
        logger.warning("%s The demo pools stay unpriced.", error)
        return
    price_pools_from_public(public, only_unpriced=True, actor_name="seed_demo", since=since)


def _seed_budgets(now: dt.datetime) -> None:
    """Each demo team without a budget gets the one its admin would set (see WEEKS_PER_MONTH): from what
    its requests of the last seven days cost at the prices in force. On unpriced pools nothing costs
    anything, and no budget is set."""
    for team in Team.objects.filter(name__in={team for _, team, _ in USERS if team}).order_by("name"):
        if Budget.objects.filter(team=team, user__isnull=True).exists():
            continue
        week = list(
            Allocation.objects.filter(request__team=team, started_at__gte=now - dt.timedelta(days=7))
            .select_related("gpu__node__pool")
            .order_by("pk")
        )
        week_usd = sum(segment_costs_usd(week, now), Decimal(0))
        if not week_usd:
            logger.info("%s used nothing priced last week: no budget.", team.name)
            continue
        monthly = week_usd * WEEKS_PER_MONTH * BUDGET_HEADROOM
        rounded = math.ceil(monthly / BUDGET_ROUNDING_USD) * BUDGET_ROUNDING_USD
        admin = Membership.objects.filter(team=team, role=Role.TEAM_ADMIN).order_by("pk").first()
        set_budget(team, actor=admin.user, monthly_usd=Decimal(rounded))


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
