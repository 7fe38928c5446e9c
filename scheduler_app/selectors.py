"""Reads that need more than one line, always scoped to what the user may see."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db.models import Case, Count, F, Max, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum, When
from django.db.models.functions import Coalesce, Length

from audit.models import Event
from scheduler_app.choices import IsolationMode, NodeStatus, RequestState
from scheduler_app.constants import (
    CHECKPOINT_EVENT,
    HEARTBEAT_WATCHDOG,
    MILLI_PER_GPU,
)
from scheduler_app.core.mig import MEMORY_SLICES
from scheduler_app.models import Allocation, Gpu, GpuRequest, LogChunk, Node, Pool, TeamQuota
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.agents import checkpoint_dir
from teams.models import Membership, Team
from teams.selectors import job_unix_account, secret_values


def requests_visible_to(user) -> QuerySet[GpuRequest]:
    """Requests of the user's teams; operators (staff) see every team's."""
    if user.is_staff:
        return GpuRequest.objects.all()
    return GpuRequest.objects.filter(team__memberships__user=user)


def team_ids_of(user) -> set[int]:
    return set(user.memberships.values_list("team_id", flat=True))


def quota_usage(team: Team) -> list[dict]:
    """Per pool: the team's guarantee, what its open allocations hold, and how much of that is borrowed.

    Only the team's active requests are looked at (the (team, state) index), never its whole history.
    """
    used: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for pool_id, milli, borrowed in (
        Allocation.objects.committed()
        .filter(request__team=team, request__state__in=ACTIVE_STATES)
        .values_list("gpu__node__pool_id", "milli", "borrowed")
    ):
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


def request_list(user) -> QuerySet[GpuRequest]:
    """The user's visible requests with team, pool, open segments (GPU, node, pool), the capacity type
    that runs them (GpuRequestQuerySet.with_capacity) and the times of all their segments (`segments`:
    how long each ran) loaded; scheduler_app.filters.GpuRequestFilter narrows them."""
    requests = requests_visible_to(user).with_capacity()
    return requests.select_related("team", "pool").prefetch_related(
        Prefetch(
            "allocations",
            queryset=Allocation.objects.committed()
            .select_related("gpu__node__pool")
            .order_by("gpu__node__name", "gpu__index"),
            to_attr="open_allocations",
        ),
        Prefetch(
            "allocations",
            queryset=Allocation.objects.only("request_id", "started_at", "ended_at").order_by(),
            to_attr="segments",
        ),
    )


def request_events(request: GpuRequest) -> QuerySet[Event]:
    """The request's event log, oldest first."""
    return Event.objects.filter(
        content_type=ContentType.objects.get_for_model(GpuRequest), object_id=request.pk
    ).order_by("created_at", "id")


@dataclass(frozen=True)
class CheckpointRun:
    """Checkpoints reported one after another, with nothing else between them: one timeline line."""

    count: int
    last: Event

    @property
    def last_at(self) -> str:
        """When the last one was taken (its agent's time, ISO 8601), else when it was reported."""
        return self.last.data.get("at") or self.last.created_at.isoformat()


def fold_checkpoints(events: Iterable[Event]) -> list[Event | CheckpointRun]:
    """The timeline as a person reads it: each run of two or more checkpoints in a row becomes one
    CheckpointRun (a demo job checkpoints every few seconds: 126 lines buried its reclaim); state
    changes, moves, reclaims and notices keep a line each."""
    timeline: list[Event | CheckpointRun] = []
    for event in events:
        last = timeline[-1] if timeline else None
        if event.to_state != CHECKPOINT_EVENT:
            timeline.append(event)
        elif isinstance(last, CheckpointRun):
            timeline[-1] = CheckpointRun(last.count + 1, event)
        elif last is not None and last.to_state == CHECKPOINT_EVENT:
            timeline[-1] = CheckpointRun(2, event)
        else:
            timeline.append(event)
    return timeline


def request_segments(request: GpuRequest) -> QuerySet[Allocation]:
    """Every allocation segment of the request, oldest first, with its card, node and pool."""
    return request.allocations.select_related("gpu__node__pool").order_by("started_at", "id")


@dataclass
class SliceView:
    """One open segment on a card as a viewer may see it: names only for the viewer's own teams."""

    milli: int
    label: str
    colour: str  # "team-N" for a visible team, "other" otherwise
    request_id: int | None
    mig_instance: str = ""


@dataclass
class MigSegmentView:
    """A run of a MIG card's memory slices in the picture: an instance (used by `slice`, or free), or
    slices no instance takes (`instance` empty)."""

    instance: str
    slots: int
    slice: SliceView | None = None

    @property
    def percent(self) -> float:
        return self.slots * 100 / MEMORY_SLICES


@dataclass
class GpuView:
    gpu: Gpu
    slices: list[SliceView] = field(default_factory=list)

    def used_milli(self) -> int:
        return sum(s.milli for s in self.slices)

    def mig_segments(self) -> list[MigSegmentView]:
        """The card's MIG layout left to right by memory slice (empty when it has none)."""
        if not self.gpu.mig_layout:
            return []
        holders = {s.mig_instance: s for s in self.slices if s.mig_instance}
        segments, at = [], 0
        for instance in self.gpu.mig_instances():
            if instance.start > at:
                segments.append(MigSegmentView("", instance.start - at))
            segments.append(
                MigSegmentView(str(instance), instance.profile.memory, holders.get(str(instance)))
            )
            at = instance.start + instance.profile.memory
        if at < MEMORY_SLICES:
            segments.append(MigSegmentView("", MEMORY_SLICES - at))
        return segments


@dataclass
class NodeView:
    node: Node
    gpus: list[GpuView] = field(default_factory=list)


@dataclass
class PoolView:
    """A pool's nodes and its capacity in milli-GPU; free counts only cards on ready nodes, less what
    the portal's slices and work outside the portal (foreign) hold."""

    pool: Pool
    nodes: list[NodeView] = field(default_factory=list)
    total_milli: int = 0
    allocated_milli: int = 0
    free_milli: int = 0
    foreign_milli: int = 0


@dataclass
class TeamQueue:
    team: Team
    pending: int
    names: list[str] | None  # None: not the viewer's team, only the count is shown


@dataclass
class ClusterPicture:
    pools: list[PoolView]
    queues: list[TeamQueue]
    legend: list[tuple[str, str]]  # (colour class, team name) for the viewer's visible teams
    nodes: list[NodeView] = field(default_factory=list)  # the nodes asked for, in their order


def cluster_picture(user, nodes: Iterable[Node] | None = None) -> ClusterPicture:
    """Capacity per pool and the queue per team, scoped to what `user` may see; the cards and slices
    of `nodes` only (none when not given: at 1,000 nodes the picture is loaded a pool or a search at
    a time).

    Another team's slices and pending requests show as "other team" and a count,
    never their names. A fixed number of queries whatever the cluster size.
    """
    visible_teams = list(Team.objects.all() if user.is_staff else Team.objects.filter(memberships__user=user))
    colours = {t.pk: f"team-{i % 6}" for i, t in enumerate(visible_teams)}
    pools = {p.pk: PoolView(p) for p in Pool.objects.order_by("name")}
    _add_pool_capacity(pools)
    node_views = _node_views(pools, list(nodes), colours) if nodes is not None else []

    counts = dict(
        GpuRequest.objects.filter(state=RequestState.PENDING)
        .values("team_id")
        .annotate(n=Count("id"))
        .values_list("team_id", "n")
    )
    names = defaultdict(list)
    for team_id, name in (
        GpuRequest.objects.filter(state=RequestState.PENDING, team_id__in=colours)
        .order_by("created_at", "id")
        .values_list("team_id", "name")
    ):
        names[team_id].append(name)
    queues = [
        TeamQueue(team, counts[team.pk], names[team.pk] if team.pk in colours else None)
        for team in Team.objects.filter(pk__in=counts)
    ]
    legend = [(colours[t.pk], t.name) for t in visible_teams]
    return ClusterPicture(list(pools.values()), queues, legend, node_views)


def _add_pool_capacity(pools: dict[int, PoolView]) -> None:
    """Per pool: every card's capacity, what open slices and work outside the portal hold, and what
    is free on ready nodes."""
    ready = Q(node__status=NodeStatus.READY)
    for pool_id, cards, ready_cards, foreign, foreign_on_ready in (
        Gpu.objects.values("node__pool_id")
        .annotate(
            cards=Count("id"),
            ready_cards=Count("id", filter=ready),
            foreign=Sum("foreign_milli"),
            foreign_on_ready=Sum("foreign_milli", filter=ready),
        )
        .values_list("node__pool_id", "cards", "ready_cards", "foreign", "foreign_on_ready")
    ):
        pools[pool_id].total_milli = cards * MILLI_PER_GPU
        pools[pool_id].foreign_milli = foreign or 0
        pools[pool_id].free_milli = ready_cards * MILLI_PER_GPU - (foreign_on_ready or 0)
    for pool_id, held, held_on_ready in (
        Allocation.objects.committed()
        .values("gpu__node__pool_id")
        .annotate(held=Sum("milli"), held_on_ready=Sum("milli", filter=Q(gpu__node__status=NodeStatus.READY)))
        .values_list("gpu__node__pool_id", "held", "held_on_ready")
    ):
        pools[pool_id].allocated_milli = held
        pools[pool_id].free_milli -= held_on_ready or 0


def _node_views(pools: dict[int, PoolView], nodes: list[Node], colours: dict[int, str]) -> list[NodeView]:
    """The nodes' cards and open slices, also filed under their pools (nodes come with their pool);
    names only for the teams in `colours`."""
    views = {}
    for node in nodes:
        views[node.pk] = NodeView(node)
        pools[node.pool_id].nodes.append(views[node.pk])
    gpus = {}
    for gpu in Gpu.objects.filter(node_id__in=views).select_related("node").order_by("node__name", "index"):
        gpus[gpu.pk] = GpuView(gpu)
        views[gpu.node_id].gpus.append(gpus[gpu.pk])
    open_segments = (
        Allocation.objects.committed()
        .filter(gpu_id__in=gpus)
        .select_related("request")
        .order_by("gpu_id", "started_at", "id")
    )
    for segment in open_segments:
        request = segment.request
        if request.team_id in colours:
            view = SliceView(
                segment.milli, request.name, colours[request.team_id], request.pk, segment.mig_instance
            )
        else:
            view = SliceView(segment.milli, "other team", "other", None, segment.mig_instance)
        gpus[segment.gpu_id].slices.append(view)
    return list(views.values())


@dataclass
class Heatmap:
    """The whole cluster's cards in a compact form for the first paint: node names once, each node's
    card ids in index order, and the util the live ticker last saw per card (None: no fresh reading)."""

    pools: list[str]
    nodes: list[str]
    node_pool: list[int]  # index into pools
    gpu_ids: list[list[int]]
    util: list[list[int | None]]


def cluster_heatmap(last_frame_gpus: dict[str, int | None]) -> Heatmap:
    """Two narrow queries whatever the cluster size; utilization comes from the live ticker's frame."""
    pools = list(Pool.objects.order_by("name").values_list("pk", "name"))
    pool_index = {pk: i for i, (pk, _) in enumerate(pools)}
    heatmap = Heatmap([name for _, name in pools], [], [], [], [])
    rows = {}
    for pk, name, pool_id in Node.objects.order_by("pool__name", "name").values_list("pk", "name", "pool_id"):
        rows[pk] = len(heatmap.nodes)
        heatmap.nodes.append(name)
        heatmap.node_pool.append(pool_index[pool_id])
        heatmap.gpu_ids.append([])
        heatmap.util.append([])
    for gpu_id, node_id in Gpu.objects.order_by("node_id", "index").values_list("pk", "node_id"):
        heatmap.gpu_ids[rows[node_id]].append(gpu_id)
        heatmap.util[rows[node_id]].append(last_frame_gpus.get(str(gpu_id)))
    return heatmap


def nodes_needing_attention() -> QuerySet[Node]:
    """Nodes out of service (lost, suspect, draining, reclaimed) and nodes whose agent runs jobs without
    isolation, the most urgent first: the operator's home page."""
    urgency = {NodeStatus.LOST: 0, NodeStatus.SUSPECT: 1, NodeStatus.RECLAIMED: 2, NodeStatus.DRAINING: 3}
    order = Case(*(When(status=status, then=rank) for status, rank in urgency.items()), default=len(urgency))
    return (
        Node.objects.filter(~Q(status=NodeStatus.READY) | Q(isolation_mode=IsolationMode.UNISOLATED))
        .select_related("pool")
        .order_by(order, "name")
    )


def pending_queue() -> QuerySet[GpuRequest]:
    """Every team's waiting requests, the longest waiting first, with their team (operators only)."""
    return (
        GpuRequest.objects.filter(state=RequestState.PENDING)
        .select_related("team")
        .order_by("created_at", "id")
    )


# What the operators' audit log shows: changes to the platform's set-up, by the model of their subject.
AUDITED = (Node, Pool, TeamQuota, Team, Membership)


def audit_events() -> QuerySet[Event]:
    """The operator-side changes (nodes, pools and their prices, quotas, teams, memberships, users' Unix
    accounts), newest first, with their subjects; scheduler_app.filters.AuditEventFilter narrows them."""
    kinds = ContentType.objects.get_for_models(*AUDITED, get_user_model()).values()
    return (
        Event.objects.filter(content_type__in=kinds)
        .select_related("content_type", "team")
        .prefetch_related("subject")
        .order_by("-created_at", "-id")
    )


@dataclass
class NodeCard:
    """One card of a node and what its open slices hold (milli-GPU, MiB); what work outside the portal
    holds is on the card (gpu.foreign_milli, gpu.foreign_memory_mib)."""

    gpu: Gpu
    milli: int = 0
    memory_mib: int = 0


def node_load(node: Node) -> tuple[list[NodeCard], list[Allocation]]:
    """The node's cards with what each holds, and the open slices on them (each with its request and the
    request's team), oldest first: the operator's node page."""
    cards = {gpu.pk: NodeCard(gpu) for gpu in node.gpus.order_by("index")}
    slices = list(
        Allocation.objects.committed()
        .filter(gpu__node=node)
        .select_related("request__team", "gpu")
        .order_by("started_at", "gpu__index")
    )
    for piece in slices:
        card = cards[piece.gpu_id]
        card.milli += piece.milli
        card.memory_mib += piece.gpu_memory_mib
    return list(cards.values()), slices


def status_event(node: Node) -> Event | None:
    """The event that gave the node its present status: who or what, when and why (None: none logged)."""
    return (
        Event.objects.filter(
            content_type=ContentType.objects.get_for_model(Node), object_id=node.pk, to_state=node.status
        )
        .order_by("-created_at", "-id")
        .first()
    )


def lost_for_silence(node: Node) -> Event | None:
    """The heartbeat watchdog's event when the node is lost because it stopped answering; None when it is
    not lost, or was marked lost by an operator (then only an operator resumes it)."""
    if node.status != NodeStatus.LOST:
        return None
    event = status_event(node)
    if event is not None and event.actor_id is None and event.actor_label == HEARTBEAT_WATCHDOG:
        return event
    return None


def nodes_for_operators() -> QuerySet[Node]:
    """Every node with its pool, card count, the milli-GPU its open segments hold, and the milli-GPU
    work outside the portal holds on its cards (foreign_milli).

    Both are subqueries per node, so closed allocations (most of them, in a cluster that has run a
    while) are never joined; the open ones are found through the committed() filter.
    """
    cards = Gpu.objects.filter(node=OuterRef("pk")).values("node").annotate(n=Count("id")).values("n")
    held = (
        Allocation.objects.committed()
        .filter(gpu__node=OuterRef("pk"))
        .values("gpu__node")
        .annotate(milli=Sum("milli"))
        .values("milli")
    )
    foreign = (
        Gpu.objects.filter(node=OuterRef("pk")).values("node").annotate(m=Sum("foreign_milli")).values("m")
    )
    return Node.objects.select_related("pool").annotate(
        gpu_count=Coalesce(Subquery(cards), 0),
        allocated_milli=Subquery(held),
        foreign_milli=Coalesce(Subquery(foreign), 0),
    )


def node_work(node: Node) -> list[dict]:
    """What the node's agent must run now: each request holding open slices of the node, with its
    command, its cards (UUID, milli-GPU, memory MiB) and its checkpoint directory. A request that
    drops out of this list (released, cancelled, requeued) is one the agent must stop; one with a
    `stop_by` (migrating) must checkpoint and stop by then. `log_offset` is where the stored log
    ends: a job started again appends its output there. The job runs as `unix_account` (empty: the
    agent's own identity for the team) in a cgroup of `cpu_milli` milli-cores and `memory_mib` MiB.

    `environment` ({NAME: value}) is what the job gets besides the agent's own variables: its team's
    secrets, decrypted, and the variables the request declares, which win over a secret of the same
    name as the more specific. Only the node a request runs on sees them: this list is the node's own.
    Three queries however many requests: the slices, the log ends, the secrets of the teams involved."""
    work: dict[int, dict] = {}
    team_of: dict[int, int] = {}
    for allocation in (
        Allocation.objects.committed()
        .filter(gpu__node=node)
        .select_related("request__team", "request__user__unix_mapping", "gpu")
        .order_by("request_id", "gpu__index")
    ):
        request = allocation.request
        team_of[request.pk] = request.team_id
        item = work.setdefault(
            request.pk,
            {
                "request_id": request.pk,
                "name": request.name,
                "team": request.team.slug,
                "state": request.state,
                "generation": request.placements,
                "task_type": request.task_type,
                "command": request.command,
                "checkpoint_dir": checkpoint_dir(request),
                "last_checkpoint_at": request.last_checkpoint_at,
                "stop_by": request.stop_by,
                "log_offset": 0,
                "environment": request.environment,
                "user": request.user.get_username(),
                "unix_account": job_unix_account(request.user, request.team),
                "cpu_milli": request.cpu_milli,
                "memory_mib": request.memory_mib,
                "gpus": [],
            },
        )
        item["gpus"].append(
            {
                "uuid": allocation.gpu.uuid,
                "milli": allocation.milli,
                "memory_mib": allocation.gpu_memory_mib,
                "mig_instance": allocation.mig_instance,
            }
        )
    ends = (
        LogChunk.objects.filter(request_id__in=list(work))
        .values("request_id")
        .annotate(end=Max(F("offset") + Length("text")))
    )
    for row in ends:
        work[row["request_id"]]["log_offset"] = row["end"]
    secrets = secret_values(set(team_of.values()))
    for request_id, item in work.items():
        item["environment"] = {**secrets.get(team_of[request_id], {}), **item["environment"]}
    return list(work.values())


@dataclass(frozen=True)
class LogTail:
    """The job output stored past an offset: `text` runs from `start` to `end`; `start` is later than
    the offset asked for when older output was dropped (the log keeps its newest part)."""

    start: int
    end: int
    text: str


def request_log(request: GpuRequest, after: int = 0) -> LogTail:
    chunks = list(LogChunk.objects.filter(request=request, offset__gte=after).order_by("offset"))
    earlier = LogChunk.objects.filter(request=request, offset__lt=after).order_by("-offset").first()
    if earlier and earlier.end() > after:  # the asked-for offset falls inside a chunk
        chunks.insert(0, earlier)
    if not chunks:
        return LogTail(start=after, end=after, text="")
    start = max(after, chunks[0].offset)
    text, position = [], start
    for chunk in chunks:
        piece = chunk.text[max(0, position - chunk.offset) :]
        text.append(piece)
        position = max(position, chunk.end())
    return LogTail(start=start, end=position, text="".join(text))
