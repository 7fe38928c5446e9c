"""Loading the database into the pure core's plain state (the read half of a scheduling pass).

Six queries whatever the cluster size: ready nodes, their cards, open
allocations, pending requests, quotas, and the recent requests whose shapes
make the workload mix the placement policy keeps room for.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from billing_app.budgets import on_demand_holds
from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.cluster import GpuState, NodeState, Placement, RequestSpec
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.queue_ledger import TeamQuota as QuotaSpec
from scheduler_app.core.queueing import RunningAllocation
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, TeamQuota

# How many of the latest requests define "the typical request shapes" (FGD's workload).
WORKLOAD_WINDOW = 2000


@dataclass
class ClusterSnapshot:
    """The core's inputs plus the keys to map its decisions back to rows."""

    nodes: list[NodeState] = field(default_factory=list)
    pending: list[RequestSpec] = field(default_factory=list)
    running: list[RunningAllocation] = field(default_factory=list)
    quotas: list[QuotaSpec] = field(default_factory=list)
    gpu_ids: dict[tuple[str, int], int] = field(default_factory=dict)  # (node, position) -> Gpu.pk
    gpu_position: dict[int, int] = field(default_factory=dict)  # Gpu.pk -> position on its node
    pool_capacity: dict[str, str] = field(default_factory=dict)
    node_pool: dict[str, str] = field(default_factory=dict)
    requests: dict[int, GpuRequest] = field(default_factory=dict)
    unplaceable: dict[int, str] = field(default_factory=dict)  # pending requests no pool may take, and why
    recent: list[RequestSpec] = field(default_factory=list)  # newest first, WORKLOAD_WINDOW at most

    @property
    def workload(self) -> WorkloadMix:
        """The recent requests' shapes: what the placement policy keeps room for (FGD's workload)."""
        return WorkloadMix.from_requests(self.recent)


def allowed_pools(request: GpuRequest, pools: list[Pool]) -> frozenset[str]:
    """The pools a request may run in: the one it names, else those its billing mode allows.

    Spot work runs on spot pools, and on on-demand pools too when it accepts the
    fallback; on-demand work never lands on reclaimable capacity.
    """
    if request.pool_id:
        return frozenset({request.pool.name})
    wanted = {CapacityType.SPOT} if request.billing_mode == BillingMode.SPOT else {CapacityType.ON_DEMAND}
    if request.billing_mode == BillingMode.SPOT and request.allow_on_demand_fallback:
        wanted.add(CapacityType.ON_DEMAND)
    return frozenset(p.name for p in pools if p.capacity_type in wanted)


def request_spec(request: GpuRequest, pools: list[Pool]) -> RequestSpec:
    """The core's view of a request; a named pool's granularity rounds the share up."""
    milli = request.gpu_milli
    if request.pool_id:
        step = request.pool.granularity_milli
        milli = min(MILLI_PER_GPU, -(-milli // step) * step)
    return RequestSpec(
        id=request.pk,
        gpu_milli=milli,
        num_gpus=request.num_gpus,
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
        gpu_memory_mib=request.gpu_memory_mib or 0,
        models=frozenset({request.gpu_model}) if request.gpu_model else frozenset(),
        pools=allowed_pools(request, pools),
        task_type=request.task_type,
        priority=request.priority,
        team=request.team.slug,
        max_duration_s=request.max_duration_s,
        billing_mode=request.billing_mode,
        allow_fallback=request.allow_on_demand_fallback,
        submitted_at=request.created_at.timestamp(),
    )


def recent_specs(pools: list[Pool]) -> list[RequestSpec]:
    """The newest requests first, as many as make the workload mix."""
    recent = GpuRequest.objects.select_related("team", "pool").order_by("-created_at", "-id")
    return [request_spec(r, pools) for r in recent[:WORKLOAD_WINDOW]]


def load_cluster_snapshot() -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    pools = list(Pool.objects.all())
    snapshot.pool_capacity = {p.name: p.capacity_type for p in pools}

    nodes = {n.pk: n for n in Node.objects.filter(status=NodeStatus.READY).select_related("pool")}
    cards = defaultdict(list)
    for gpu in Gpu.objects.filter(node_id__in=nodes).order_by("node_id", "index"):
        cards[gpu.node_id].append(gpu)
    states: dict[int, NodeState] = {}
    for node_id, node in nodes.items():
        # The core addresses cards by position on the node, whatever their NVML indices.
        gpus = [
            GpuState(index=i, model=g.model, memory_mib=g.memory_mib) for i, g in enumerate(cards[node_id])
        ]
        states[node_id] = NodeState(
            name=node.name,
            pool=node.pool.name,
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
            gpus=gpus,
            capacity_type=node.pool.capacity_type,
        )
        snapshot.node_pool[node.name] = node.pool.name
        for position, gpu in enumerate(cards[node_id]):
            snapshot.gpu_ids[(node.name, position)] = gpu.pk
            snapshot.gpu_position[gpu.pk] = position
    snapshot.nodes = list(states.values())

    _take_out_running(snapshot, states, pools)

    pending = (
        GpuRequest.objects.filter(state=RequestState.PENDING)
        .select_related("team", "pool")
        .order_by("created_at", "id")
    )
    holds = on_demand_holds(timezone.now())
    for request in pending:
        snapshot.requests[request.pk] = request
        spec = request_spec(request, pools)
        held = request.billing_mode == BillingMode.ON_DEMAND and (
            holds.get((request.team_id, None)) or holds.get((request.team_id, request.user_id))
        )
        if held:
            snapshot.unplaceable[request.pk] = held
        elif spec.pools:
            snapshot.pending.append(spec)
        else:
            snapshot.unplaceable[request.pk] = f"no {request.billing_mode} pool exists" + (
                "; allow on-demand fallback to run elsewhere"
                if request.billing_mode == BillingMode.SPOT
                else ""
            )
    snapshot.recent = recent_specs(pools)
    snapshot.quotas = [
        QuotaSpec(team=q.team.slug, pool=q.pool.name, guaranteed_milli=q.guaranteed_milli)
        for q in TeamQuota.objects.select_related("team", "pool")
    ]
    return snapshot


def _take_out_running(snapshot: ClusterSnapshot, states: dict[int, NodeState], pools: list[Pool]) -> None:
    """Subtract open segments from the nodes and describe them to the core as running work."""
    segments = defaultdict(list)
    open_allocations = (
        Allocation.objects.committed()
        .select_related("gpu", "request__team", "request__pool")
        .order_by("request_id", "gpu_id")
    )
    for allocation in open_allocations:
        segments[allocation.request_id].append(allocation)
    for pieces in segments.values():
        node = states.get(pieces[0].gpu.node_id)
        if node is None:  # on a node that is not ready: it holds its cards, but nothing is placed there
            continue
        request = pieces[0].request
        node.free_cpu_milli -= request.cpu_milli
        node.free_memory_mib -= request.memory_mib
        for piece in pieces:
            card = node.gpus[snapshot.gpu_position[piece.gpu_id]]
            card.free_milli -= piece.milli
            card.free_memory_mib -= piece.gpu_memory_mib
        placement = Placement(
            request.pk,
            node.name,
            tuple(snapshot.gpu_position[p.gpu_id] for p in pieces),
            pieces[0].milli,
            pieces[0].gpu_memory_mib,
        )
        started: datetime = min(p.started_at for p in pieces)
        snapshot.requests[request.pk] = request
        snapshot.running.append(
            RunningAllocation(
                request_spec(request, pools),
                placement,
                started.timestamp(),
                borrowed=any(p.borrowed for p in pieces),
            )
        )
