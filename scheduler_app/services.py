"""Every write to the cluster, requests and allocations goes through a function here.

Each one validates first (a ValidationError naming the field; nothing written),
writes in one transaction, logs an Event and publishes the live update.
"""

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from portal.models import Team
from portal.tokens import hash_token, new_token
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.dispatch import schedule_soon
from scheduler_app.events import log_event
from scheduler_app.lifecycle import StateConflict, check_transition
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, TeamQuota

SYSTEM = "system"


class OverCommitError(Exception):
    """An allocation would put a card over 1000 milli-GPU or over its memory; nothing was written."""


@dataclass(frozen=True)
class Slice:
    """A piece of one card for one request: milli-GPU and GPU memory (MiB)."""

    gpu_id: int
    milli: int
    gpu_memory_mib: int


def validated_request(*, user, team: Team | None, pool_name: str = "", **fields) -> GpuRequest:
    """An unsaved request, checked as submit_request checks it (ValidationError naming the field)."""
    errors: dict[str, str] = {}
    if team is None:
        errors["team"] = "A request needs a team."
    elif not team.memberships.filter(user=user).exists():
        errors["team"] = f"You are not a member of team {team.name}."
    pool = None
    if pool_name:
        pool = Pool.objects.filter(name=pool_name).first()
        if pool is None:
            errors["pool"] = f"No pool named {pool_name!r}."
    if errors:
        raise ValidationError(errors)

    request = GpuRequest(team=team, user=user, pool=pool, state=RequestState.PENDING, **fields)
    # Team, user and pool are rows in hand: full_clean need not query each one's existence again.
    held = [name for name, row in (("team", team), ("user", user), ("pool", pool)) if row is not None]
    request.full_clean(exclude=held, validate_constraints=False)
    _check_fits_some_gpu(request)
    return request


def submit_request(*, user, team: Team | None, pool_name: str = "", **fields) -> GpuRequest:
    """Accept a request from a member of `team`; it starts pending. Fields as on GpuRequest."""
    request = validated_request(user=user, team=team, pool_name=pool_name, **fields)
    with transaction.atomic():
        request.save()
        log_event(request, RequestState.PENDING, actor=user, team=team, reason="submitted")
        schedule_soon()
    return request


def _check_fits_some_gpu(request: GpuRequest) -> None:
    """Refuse what no card of the cluster could ever hold, rather than leave it pending forever.

    Only a GPU model or a memory size can rule every card out; without either, no query."""
    if not (request.gpu_model or request.gpu_memory_mib):
        return
    gpus = Gpu.objects.all()
    if request.pool_id:
        gpus = gpus.filter(node__pool=request.pool)
    if request.gpu_model:
        gpus = gpus.filter(model=request.gpu_model)
    largest = gpus.aggregate(largest=Max("memory_mib"))["largest"]  # None: no such card at all
    if request.gpu_model and largest is None:
        where = f" in pool {request.pool.name}" if request.pool_id else ""
        raise ValidationError({"gpu_model": f"No GPU of model {request.gpu_model!r}{where}."})
    if request.gpu_memory_mib and largest is not None and request.gpu_memory_mib > largest:
        raise ValidationError(
            {"gpu_memory_mib": f"No GPU has {request.gpu_memory_mib} MiB; the largest has {largest} MiB."}
        )


def transition_request(
    request: GpuRequest, to_state: str, *, actor=None, reason: str = "", actor_name: str = ""
) -> GpuRequest:
    """The one way a request changes state: legal per lifecycle.TRANSITIONS, logged, published.

    Locks the row so two workers cannot both move the same request.
    """
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        from_state = locked.state
        check_transition(from_state, to_state)
        now = timezone.now()
        locked.state = to_state
        stamp = {RequestState.SCHEDULED: "scheduled_at", RequestState.RUNNING: "started_at"}.get(to_state)
        if stamp and getattr(locked, stamp) is None:
            setattr(locked, stamp, now)
        if locked.is_terminal():
            locked.ended_at = now
        if to_state != RequestState.PENDING:
            locked.pending_reason = ""
            locked.estimated_start_at = None
        locked.save()
        log_event(locked, to_state, from_state=from_state, actor=actor, actor_name=actor_name, reason=reason)
    request.refresh_from_db()
    return request


def release_request(request: GpuRequest, *, user) -> GpuRequest:
    """The user is done with the capacity: running work ends succeeded, work not yet started cancelled."""
    if not request.team.memberships.filter(user=user).exists():
        raise PermissionError("Only members of the request's team can release it.")
    if not request.is_active():
        raise StateConflict(f"A {request.state} request holds no GPU to release; cancel it instead.")
    to_state = RequestState.SUCCEEDED if request.state == RequestState.RUNNING else RequestState.CANCELLED
    with transaction.atomic():
        close_allocations(request)
        schedule_soon()
        return transition_request(request, to_state, actor=user, reason="released by user")


def cancel_request(request: GpuRequest, *, user, reason: str = "cancelled by user") -> GpuRequest:
    """Stop a request at the user's wish: its open segments close and it ends cancelled."""
    if not request.team.memberships.filter(user=user).exists():
        raise PermissionError("Only members of the request's team can cancel it.")
    with transaction.atomic():
        close_allocations(request)
        schedule_soon()
        return transition_request(request, RequestState.CANCELLED, actor=user, reason=reason)


def allocate(
    request: GpuRequest, slices: list[Slice], *, borrowed: bool = False, actor_name: str = "scheduler"
) -> list[Allocation]:
    """Give a pending request its cards, all at once (a gang), and mark it scheduled.

    Locks the cards in id order (no deadlock between two schedulers) and checks
    the open segments under the lock, so no card ever exceeds 1000 milli-GPU or
    its memory (DESIGN rule 1), whatever runs concurrently.
    """
    if len(slices) != request.num_gpus or len({s.gpu_id for s in slices}) != len(slices):
        raise ValidationError({"slices": f"{request.name} needs {request.num_gpus} distinct card(s)."})
    with transaction.atomic():
        gpus = {
            g.id: g
            for g in Gpu.objects.select_for_update()
            .filter(id__in=[s.gpu_id for s in slices])
            .select_related("node")
            .order_by("id")
        }
        committed = {
            row["gpu_id"]: (row["milli"], row["mem"])
            for row in Allocation.objects.filter(gpu_id__in=gpus, ended_at__isnull=True)
            .values("gpu_id")
            .annotate(milli=Sum("milli"), mem=Sum("gpu_memory_mib"))
        }
        for piece in slices:
            gpu = gpus.get(piece.gpu_id)
            if gpu is None:
                raise ValidationError({"slices": f"No GPU with id {piece.gpu_id}."})
            if not gpu.node.is_schedulable():
                raise OverCommitError(f"{gpu} is on a {gpu.node.status} node.")
            milli, memory = committed.get(gpu.id, (0, 0))
            if milli + piece.milli > MILLI_PER_GPU:
                raise OverCommitError(f"{gpu} has {MILLI_PER_GPU - milli} milli-GPU free, not {piece.milli}.")
            if memory + piece.gpu_memory_mib > gpu.memory_mib:
                raise OverCommitError(
                    f"{gpu} has {gpu.memory_mib - memory} MiB free, not {piece.gpu_memory_mib}."
                )
        now = timezone.now()
        allocations = Allocation.objects.bulk_create(
            Allocation(
                request=request,
                gpu_id=piece.gpu_id,
                milli=piece.milli,
                gpu_memory_mib=piece.gpu_memory_mib,
                billing_mode=request.billing_mode,
                borrowed=borrowed,
                started_at=now,
            )
            for piece in slices
        )
        where = ", ".join(str(gpus[s.gpu_id]) for s in slices)
        transition_request(
            request, RequestState.SCHEDULED, actor_name=actor_name, reason=f"placed on {where}"
        )
    return allocations


def close_allocations(request: GpuRequest) -> int:
    """End the request's open segments now; returns how many were closed."""
    return Allocation.objects.filter(request=request, ended_at__isnull=True).update(ended_at=timezone.now())


def set_node_status(node: Node, status: str, *, actor=None, reason: str = "", actor_name: str = "") -> Node:
    """Drain, undrain, mark suspect, lost or reclaimed; logged like every state change."""
    if status not in NodeStatus.values:
        raise ValidationError(
            {"status": f"{status!r} is not a node status; choose from {', '.join(NodeStatus.values)}."}
        )
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.status == status:
            return locked
        from_state, locked.status = locked.status, status
        locked.save(update_fields=["status"])
        log_event(locked, status, from_state=from_state, actor=actor, actor_name=actor_name, reason=reason)
    node.refresh_from_db()
    return node


def create_pool(
    *, name: str, gpu_model: str, capacity_type: str, granularity_milli: int = 125, **extra
) -> Pool:
    pool = Pool(
        name=name,
        gpu_model=gpu_model,
        capacity_type=capacity_type,
        granularity_milli=granularity_milli,
        **extra,
    )
    pool.full_clean()
    pool.save()
    return pool


def register_node(
    *, pool: Pool, name: str, cpu_milli: int, memory_mib: int, gpus: list[dict]
) -> tuple[Node, str]:
    """Add a node and its cards; returns the node and its agent credential, shown this once."""
    node = Node(pool=pool, name=name, cpu_milli=cpu_milli, memory_mib=memory_mib)
    node.full_clean(exclude=["agent_token_hash"])
    with transaction.atomic():
        node.save()
        for index, spec in enumerate(gpus):
            gpu = Gpu(node=node, index=index, **spec)
            gpu.full_clean()
            gpu.save()
        token = issue_agent_credential(node)
        log_event(node, node.status, reason="registered", actor_name=SYSTEM)
    return node, token


def issue_agent_credential(node: Node) -> str:
    """A fresh random credential for the node's agent; only its hash is stored."""
    token = new_token("node")
    Node.objects.filter(pk=node.pk).update(agent_token_hash=hash_token(token))
    node.agent_token_hash = hash_token(token)
    return token


def node_for_agent_token(token: str) -> Node | None:
    if not token:
        return None
    return Node.objects.filter(agent_token_hash=hash_token(token)).first()


def set_team_quota(*, team: Team, pool: Pool, guaranteed_milli: int, actor) -> TeamQuota:
    """Operators set a team's guaranteed milli-GPU in a pool (0 removes the guarantee)."""
    if not actor.is_staff:
        raise PermissionError("Only platform operators set quotas.")
    if guaranteed_milli < 0:
        raise ValidationError({"guaranteed_milli": "A quota cannot be negative."})
    with transaction.atomic():
        quota, _ = TeamQuota.objects.select_for_update().get_or_create(
            team=team, pool=pool, defaults={"guaranteed_milli": 0}
        )
        before, quota.guaranteed_milli = quota.guaranteed_milli, guaranteed_milli
        quota.save(update_fields=["guaranteed_milli"])
        log_event(
            quota,
            str(guaranteed_milli),
            from_state=str(before),
            actor=actor,
            team=team,
            reason=f"quota on {pool.name} in milli-GPU",
        )
        schedule_soon()
    return quota


def update_pool(pool: Pool, *, actor, **fields) -> Pool:
    """Operators change a pool's description, granularity or capacity type; logged with the old values."""
    if not actor.is_staff:
        raise PermissionError("Only platform operators change pools.")
    allowed = {"description", "granularity_milli", "capacity_type", "gpu_model"}
    if unknown := set(fields) - allowed:
        raise ValidationError({name: "This field cannot be changed here." for name in unknown})
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        before = {name: getattr(locked, name) for name in fields}
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.full_clean()
        locked.save(update_fields=list(fields))
        change = ", ".join(f"{name}: {before[name]} → {value}" for name, value in fields.items())
        log_event(locked, "updated", actor=actor, reason=change)
    return locked
