"""Loading the database into the pure core's plain state (the read half of a scheduling pass).

Seven queries whatever the cluster size: the nodes, their cards, open
allocations and their requests, pending requests, quotas, and the recent requests whose shapes
make the workload mix the placement policy keeps room for; an eighth when some node takes no new
work (since when, from the event log).
"""

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from django.contrib.contenttypes.models import ContentType
from django.db.models import Max, QuerySet
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.cluster import GpuState, NodeState, OfflineNode, Placement, RequestSpec
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.mig import MigCard, card_instances, hold
from scheduler_app.core.queue_ledger import TeamQuota as QuotaSpec
from scheduler_app.core.queueing import RunningAllocation
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, TeamQuota
from scheduler_app.rules.billing import billing

# How many of the latest requests define "the typical request shapes" (FGD's workload).
WORKLOAD_WINDOW = 2000


@dataclass
class ClusterSnapshot:
    """The core's inputs plus the keys to map its decisions back to rows."""

    nodes: list[NodeState] = field(default_factory=list)
    offline: list[OfflineNode] = field(default_factory=list)  # the nodes that take no new work
    pending: list[RequestSpec] = field(default_factory=list)
    running: list[RunningAllocation] = field(default_factory=list)
    quotas: list[QuotaSpec] = field(default_factory=list)
    gpu_ids: dict[tuple[str, int], int] = field(default_factory=dict)  # (node, position) -> Gpu.pk
    gpu_position: dict[int, int] = field(default_factory=dict)  # Gpu.pk -> position on its node
    pool_capacity: dict[str, str] = field(default_factory=dict)
    node_pool: dict[str, str] = field(default_factory=dict)
    unplaceable: dict[int, str] = field(default_factory=dict)  # pending requests no pool may take, and why
    recent: list[RequestSpec] = field(default_factory=list)  # newest first, WORKLOAD_WINDOW at most
    # Cards held by work checkpointing before it stops (Gpu.pk -> its deadline): the core counts their
    # capacity as free, so it plans on it without preempting anyone else; a start on them waits.
    stopping: dict[int, datetime] = field(default_factory=dict)
    budget_held: bool = False  # some pending request waits on a spent budget (in unplaceable)

    @property
    def workload(self) -> WorkloadMix:
        """The recent requests' shapes: what the placement policy keeps room for (FGD's workload)."""
        return WorkloadMix.from_requests(self.recent)


def allowed_pools(request: GpuRequest, pools: list[Pool]) -> frozenset[str]:
    """The pools a request may run in: the one it names, else those its billing mode allows.

    Spot work runs on spot pools, and on on-demand pools too when it accepts the
    fallback; on-demand work never lands on reclaimable capacity.
    """
    return _allowed_pools(request.pool_id, request.billing_mode, request.allow_on_demand_fallback, pools)


def _allowed_pools(
    pool_id: int | None, billing_mode: str, fallback: bool, pools: list[Pool]
) -> frozenset[str]:
    if pool_id:
        return frozenset(p.name for p in pools if p.pk == pool_id)
    wanted = {CapacityType.SPOT} if billing_mode == BillingMode.SPOT else {CapacityType.ON_DEMAND}
    if billing_mode == BillingMode.SPOT and fallback:
        wanted.add(CapacityType.ON_DEMAND)
    return frozenset(p.name for p in pools if p.capacity_type in wanted)


# What a RequestSpec is made of, as `values_list` reads it (a pass reads thousands: no model instances);
# a workload mix reads only the shape.
_SHAPE_FIELDS = (
    "pk",
    "gpu_milli",
    "num_gpus",
    "cpu_milli",
    "memory_mib",
    "gpu_memory_mib",
    "gpu_model",
    "pool_id",
)
_SPEC_FIELDS = (
    *_SHAPE_FIELDS,
    "task_type",
    "priority",
    "team__slug",
    "max_duration_s",
    "billing_mode",
    "allow_on_demand_fallback",
    "created_at",
)


def request_spec(request: GpuRequest, pools: list[Pool]) -> RequestSpec:
    """The core's view of a request; a named pool's granularity rounds the share up."""
    values = [request.team.slug if name == "team__slug" else getattr(request, name) for name in _SPEC_FIELDS]
    return _spec(pools, values, allowed=lambda *kind: _allowed_pools(*kind, pools))


def request_specs(requests, pools: list[Pool]) -> list[RequestSpec]:
    """`request_spec` of each request of a queryset, in its order, read as plain values. A pass reads
    thousands, of a handful of kinds: the pools each kind may use are worked out once."""
    allowed = functools.cache(lambda *kind: _allowed_pools(*kind, pools))
    return [_spec(pools, row, allowed=allowed) for row in requests.values_list(*_SPEC_FIELDS)]


def _shape(
    pools: list[Pool],
    pk: int,
    gpu_milli: int,
    num_gpus: int,
    cpu_milli: int,
    memory_mib: int,
    gpu_memory_mib: int | None,
    gpu_model: str,
    pool_id: int | None,
) -> dict:
    """What of a RequestSpec a workload mix reads (its shape), as keyword arguments; a named pool's
    granularity rounds the share up."""
    milli = gpu_milli
    if pool_id:
        step = next(p.granularity_milli for p in pools if p.pk == pool_id)
        milli = min(MILLI_PER_GPU, -(-milli // step) * step)
    return {
        "id": pk,
        "gpu_milli": milli,
        "num_gpus": num_gpus,
        "cpu_milli": cpu_milli,
        "memory_mib": memory_mib,
        "gpu_memory_mib": gpu_memory_mib or 0,
        "models": frozenset({gpu_model}) if gpu_model else frozenset(),
    }


def _spec(
    pools: list[Pool], row: Sequence, *, allowed: Callable[[int | None, str, bool], frozenset[str]]
) -> RequestSpec:
    """The spec of one row of `_SPEC_FIELDS`: its shape (`_shape`), then the rest."""
    shape = row[: len(_SHAPE_FIELDS)]
    task_type, priority, team, max_duration_s, billing_mode, fallback, created_at = row[len(_SHAPE_FIELDS) :]
    return RequestSpec(
        **_shape(pools, *shape),
        pools=allowed(shape[-1], billing_mode, fallback),  # (the shape ends with the pool id)
        task_type=task_type,
        priority=priority,
        team=team,
        max_duration_s=max_duration_s,
        billing_mode=billing_mode,
        allow_fallback=fallback,
        submitted_at=created_at.timestamp(),
    )


def recent_specs(pools: list[Pool]) -> list[RequestSpec]:
    """The newest requests first, as many as make the workload mix, with only what a mix reads of
    them (their shapes: the rest of each spec is left at its default). Every pass reads them."""
    newest = GpuRequest.objects.order_by("-created_at", "-id").values_list(*_SHAPE_FIELDS)[:WORKLOAD_WINDOW]
    return [RequestSpec(**_shape(pools, *row)) for row in newest]


class Card(NamedTuple):
    """A card as a pass reads it: as values, not a model (a pass reads 16,000; models cost 0.15 s)."""

    pk: int
    node_id: int
    model: str
    memory_mib: int
    mig_layout: str
    foreign_milli: int
    foreign_memory_mib: int


def cards_by_node(gpus: QuerySet[Gpu]) -> dict[int, list[Card]]:
    """Node id -> its cards in index order (nodes without cards: an empty list)."""
    cards = defaultdict(list)
    for card in gpus.order_by("node_id", "index").values_list(*Card._fields):
        cards[card[1]].append(Card(*card))
    return cards


def load_cluster_snapshot() -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    pools = list(Pool.objects.all())
    snapshot.pool_capacity = {p.name: p.capacity_type for p in pools}

    every = {n.pk: n for n in Node.objects.select_related("pool")}
    cards = cards_by_node(Gpu.objects.filter(node_id__in=every))
    nodes = {pk: n for pk, n in every.items() if n.status == NodeStatus.READY}
    states = {node_id: node_state(node, cards[node_id]) for node_id, node in nodes.items()}
    snapshot.offline = offline_nodes([n for n in every.values() if n.status != NodeStatus.READY], cards)
    index_cards(snapshot, ((n.name, n.pool.name, [g.pk for g in cards[pk]]) for pk, n in nodes.items()))
    snapshot.nodes = list(states.values())

    _take_out_foreign(states, nodes, cards)
    _take_out_running(snapshot, states, pools)

    pending = GpuRequest.objects.filter(state=RequestState.PENDING).order_by("created_at", "id")
    held = _held_by_budgets(pending)
    snapshot.budget_held = bool(held)
    for spec in request_specs(pending, pools):
        if spec.id in held:
            snapshot.unplaceable[spec.id] = held[spec.id]
        elif spec.pools:
            snapshot.pending.append(spec)
        else:
            snapshot.unplaceable[spec.id] = no_pool(spec)
    snapshot.recent = recent_specs(pools)
    snapshot.quotas = [
        QuotaSpec(team=q.team.slug, pool=q.pool.name, guaranteed_milli=q.guaranteed_milli)
        for q in TeamQuota.objects.select_related("team", "pool")
    ]
    return snapshot


def index_cards(snapshot: ClusterSnapshot, nodes: Iterable[tuple[str, str, list[int]]]) -> None:
    """Map the core's (node, card position) to card ids and back, and nodes to pools, from
    (node name, pool name, the node's card ids in index order) of each ready node."""
    for name, pool, gpu_ids in nodes:
        snapshot.node_pool[name] = pool
        for position, gpu_id in enumerate(gpu_ids):
            snapshot.gpu_ids[(name, position)] = gpu_id
            snapshot.gpu_position[gpu_id] = position


def format_utc(timestamp: float) -> str:
    """How a pending reason shows a time: minutes, UTC, unambiguous."""
    return f"{datetime.fromtimestamp(timestamp, tz=UTC):%Y-%m-%d %H:%M} UTC"


def offline_nodes(nodes: list[Node], cards: dict[int, list[Card]]) -> list[OfflineNode]:
    """The nodes that take no new work (`pool` loaded), as the core names them in a pending reason:
    idle, with their status and since when (its latest change to that status in the event log)."""
    if not nodes:
        return []
    changes = (
        Event.objects.filter(
            content_type=ContentType.objects.get_for_model(Node),
            object_id__in=[n.pk for n in nodes],
            to_state__in=[n.status for n in nodes],
        )
        .order_by()
        .values("object_id", "to_state")
        .annotate(at=Max("created_at"))
    )
    since = {(c["object_id"], c["to_state"]): c["at"] for c in changes}
    return [
        OfflineNode(
            node_state(n, cards[n.pk]),
            n.status,
            format_utc(at.timestamp()) if (at := since.get((n.pk, n.status))) else "",
        )
        for n in sorted(nodes, key=lambda n: n.name)
    ]


def no_pool(spec: RequestSpec) -> str:
    """Why a pending request no pool may take waits."""
    fallback = "; allow on-demand fallback to run elsewhere" if spec.billing_mode == BillingMode.SPOT else ""
    return f"no {spec.billing_mode} pool exists{fallback}"


def empty_cluster() -> list[NodeState]:
    """Every node of today's cluster as the core sees it when nothing runs, by name (what-ifs and the
    demo's history are placed on it)."""
    cards = cards_by_node(Gpu.objects.all())
    return [node_state(node, cards[node.pk]) for node in Node.objects.select_related("pool").order_by("name")]


def quota_specs() -> list[QuotaSpec]:
    """Today's team quotas as the core reads them."""
    return [
        QuotaSpec(q.team.slug, q.pool.name, q.guaranteed_milli)
        for q in TeamQuota.objects.select_related("team", "pool")
    ]


def node_state(node: Node, cards: list[Card]) -> NodeState:
    """The core's view of an empty node (`node.pool` loaded), its cards in index order."""
    # The core addresses cards by position on the node, whatever their NVML indices.
    mode = node.pool.mig_mode
    gpus = [
        GpuState(
            index=i,
            model=g.model,
            memory_mib=g.memory_mib,
            mig=MigCard(mode, g.memory_mib, card_instances(g.mig_layout, g.memory_mib)) if mode else None,
        )
        for i, g in enumerate(cards)
    ]
    return NodeState(
        name=node.name,
        pool=node.pool.name,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpus=gpus,
        capacity_type=node.pool.capacity_type,
    )


def _take_out_foreign(
    states: dict[int, NodeState], nodes: dict[int, Node], cards: dict[int, list[Card]]
) -> None:
    """Subtract what work outside the portal holds (Node/Gpu foreign_*, as the nodes' backends see it):
    the core never plans on it. MIG cards are left as their layout says: a backend maps no MIG
    instances held outside the portal."""
    for node_id, state in states.items():
        node = nodes[node_id]
        state.free_cpu_milli -= node.foreign_cpu_milli
        state.free_memory_mib -= node.foreign_memory_mib
        for card, gpu in zip(state.gpus, cards[node_id], strict=True):
            if card.mig is None:
                card.free_milli -= gpu.foreign_milli
                card.free_memory_mib -= gpu.foreign_memory_mib


def _take_out_running(snapshot: ClusterSnapshot, states: dict[int, NodeState], pools: list[Pool]) -> None:
    """Subtract open segments from the nodes and describe them to the core as running work; segments of
    work being stopped (migrating) are left out: they are leaving (snapshot.stopping)."""
    stopping = dict(
        GpuRequest.objects.filter(state=RequestState.MIGRATING, stop_by__isnull=False).values_list(
            "pk", "stop_by"
        )
    )
    segments = defaultdict(list)
    open_allocations = (
        Allocation.objects.committed()
        .order_by("request_id", "gpu_id")
        .values_list(
            "request_id",
            "gpu_id",
            "gpu__node_id",
            "milli",
            "gpu_memory_mib",
            "started_at",
            "borrowed",
            "mig_instance",
        )
    )
    for piece in open_allocations:
        if piece[0] in stopping:
            snapshot.stopping[piece[1]] = stopping[piece[0]]
        elif piece[2] in states:  # else on a node not ready: it holds its cards, nothing is placed there
            segments[piece[0]].append(piece)
    holding = Allocation.objects.committed().values("request_id")
    running = GpuRequest.objects.filter(pk__in=holding).order_by("pk")
    for request in request_specs(running, pools):
        pieces = segments.get(request.id)
        if pieces is None:
            continue
        node = states[pieces[0][2]]
        node.free_cpu_milli -= request.cpu_milli
        node.free_memory_mib -= request.memory_mib
        instances = []
        for _, gpu_id, _, milli, gpu_memory_mib, _, _, mig_instance in pieces:
            card = node.gpus[snapshot.gpu_position[gpu_id]]
            if card.mig is not None and mig_instance:
                instances.append((hold(card, mig_instance), None))
                continue
            card.free_milli -= milli
            card.free_memory_mib -= gpu_memory_mib
        placement = Placement(
            request.id,
            node.name,
            tuple(snapshot.gpu_position[piece[1]] for piece in pieces),
            pieces[0][3],
            pieces[0][4],
            tuple(instances),
        )
        started: datetime = min(piece[5] for piece in pieces)
        snapshot.running.append(
            RunningAllocation(request, placement, started.timestamp(), borrowed=any(p[6] for p in pieces))
        )


def _held_by_budgets(pending) -> dict[int, str]:
    """{request id: why} for pending on-demand requests whose team's (or user's) spent budget holds
    them (billing's holds); no request is read unless some budget holds work."""
    holds = billing().holds(timezone.now())
    if not holds:
        return {}
    held = {}
    rows = pending.filter(billing_mode=BillingMode.ON_DEMAND).values_list("pk", "team_id", "user_id")
    for pk, team_id, user_id in rows:
        if why := holds.get((team_id, None)) or holds.get((team_id, user_id)):
            held[pk] = why
    return held
