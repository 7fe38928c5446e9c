"""Reads that need more than one line, always scoped to what the user may see."""

from collections import defaultdict

from django.db.models import Count, QuerySet

from portal.models import Team
from scheduler_app.choices import RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, TeamQuota


def requests_visible_to(user) -> QuerySet[GpuRequest]:
    """Requests of the user's teams; operators (staff) see every team's."""
    if user.is_staff:
        return GpuRequest.objects.all()
    return GpuRequest.objects.filter(team__memberships__user=user)


def team_ids_of(user) -> set[int]:
    return set(user.memberships.values_list("team_id", flat=True))


def cluster_overview(user) -> list[dict]:
    """Pools → nodes → GPUs with allocated slices; what the user's teams hold is told apart, nothing more.

    Five queries whatever the cluster size.
    """
    mine = team_ids_of(user)
    held: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])  # gpu id -> milli, memory, yours
    for gpu_id, milli, memory, team_id in Allocation.objects.filter(ended_at__isnull=True).values_list(
        "gpu_id", "milli", "gpu_memory_mib", "request__team_id"
    ):
        totals = held[gpu_id]
        totals[0] += milli
        totals[1] += memory
        totals[2] += milli if team_id in mine else 0
    gpus_by_node = defaultdict(list)
    for gpu in Gpu.objects.order_by("node_id", "index"):
        milli, memory, yours = held[gpu.pk]
        gpus_by_node[gpu.node_id].append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "memory_mib": gpu.memory_mib,
                "allocated_milli": milli,
                "allocated_memory_mib": memory,
                "yours_milli": yours,
            }
        )
    pending = dict(
        GpuRequest.objects.filter(state=RequestState.PENDING, pool__isnull=False)
        .values_list("pool_id")
        .annotate(n=Count("id"))
    )
    nodes_by_pool = defaultdict(list)
    for node in Node.objects.order_by("name"):
        nodes_by_pool[node.pool_id].append(
            {
                "name": node.name,
                "status": node.status,
                "last_heartbeat_at": node.last_heartbeat_at,
                "gpus": gpus_by_node[node.pk],
            }
        )
    overview = []
    for pool in Pool.objects.order_by("name"):
        gpus = [g for n in nodes_by_pool[pool.pk] for g in n["gpus"]]
        allocated = sum(g["allocated_milli"] for g in gpus)
        overview.append(
            {
                "name": pool.name,
                "gpu_model": pool.gpu_model,
                "capacity_type": pool.capacity_type,
                "granularity_milli": pool.granularity_milli,
                "capacity_milli": len(gpus) * MILLI_PER_GPU,
                "allocated_milli": allocated,
                "free_milli": len(gpus) * MILLI_PER_GPU - allocated,
                "pending_requests": pending.get(pool.pk, 0),
                "nodes": nodes_by_pool[pool.pk],
            }
        )
    return overview


def quota_usage(team: Team) -> list[dict]:
    """Per pool: the team's guarantee, what its open allocations hold, and how much of that is borrowed."""
    used: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for pool_id, milli, borrowed in Allocation.objects.filter(
        ended_at__isnull=True, request__team=team
    ).values_list("gpu__node__pool_id", "milli", "borrowed"):
        used[pool_id][0] += milli
        used[pool_id][1] += milli if borrowed else 0
    guaranteed = dict(TeamQuota.objects.filter(team=team).values_list("pool_id", "guaranteed_milli"))
    return [
        {
            "pool": pool.name,
            "guaranteed_milli": guaranteed.get(pool.pk, 0),
            "used_milli": used[pool.pk][0],
            "borrowed_milli": used[pool.pk][1],
        }
        for pool in Pool.objects.filter(pk__in=set(guaranteed) | set(used)).order_by("name")
    ]
