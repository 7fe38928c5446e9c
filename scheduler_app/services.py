"""Every write to the cluster, requests and allocations goes through a function here.

Each one validates first (a ValidationError naming the field; nothing written),
writes in one transaction, logs an Event and publishes the live update.
"""

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from portal.models import Team
from portal.tokens import hash_token, new_token
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.dispatch import schedule_soon
from scheduler_app.events import build_event, log_event, record_events
from scheduler_app.lifecycle import ACTIVE_STATES, StateConflict, check_transition
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, TeamQuota

SYSTEM = "system"


class OverCommitError(Exception):
    """A start would put a card over 1000 milli-GPU or over its memory, or use an unschedulable card."""


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
    """The one way a single request changes state; IllegalTransition (nothing written) if not allowed."""
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        check_transition(locked.state, to_state)
        _refuse_scheduling_without_cards(to_state)
        _move([locked], to_state, actor=actor, actor_name=actor_name, reasons={locked.pk: reason})
    request.refresh_from_db()
    return request


def transition_requests(
    request_ids: Iterable[int],
    to_state: str,
    *,
    from_states: Iterable[str],
    actor=None,
    actor_name: str = "",
    reason: str = "",
    reasons: dict[int, str] | None = None,
    now: dt.datetime | None = None,
) -> list[GpuRequest]:
    """The bulk form: lock the rows in id order and move those still in `from_states`; returns them.

    Requests that left `from_states` meanwhile (another writer got there first)
    are skipped, not an error: a pass or the watchdog acts on a snapshot.
    """
    _refuse_scheduling_without_cards(to_state)
    sources = set(from_states)
    for source in sources:
        check_transition(source, to_state)
    with transaction.atomic():
        locked = list(
            GpuRequest.objects.select_for_update(of=("self",))
            .filter(pk__in=list(request_ids), state__in=sources)
            .select_related("team")
            .order_by("pk")
        )
        why = {r.pk: (reasons or {}).get(r.pk, reason) for r in locked}
        _move(locked, to_state, actor=actor, actor_name=actor_name, reasons=why, now=now)
    return locked


def _refuse_scheduling_without_cards(to_state: str) -> None:
    if to_state == RequestState.SCHEDULED:
        raise StateConflict("A request is scheduled only by placing it on cards (services.place).")


def requeue(
    request_ids: Iterable[int],
    *,
    reason: str,
    actor=None,
    actor_name: str = "",
    now: dt.datetime | None = None,
) -> list[GpuRequest]:
    """Put active requests back in the queue (node lost, preempted, reclaimed): their slices close and
    the reason becomes their pending reason. Serves preemption and node loss alike."""
    return transition_requests(
        request_ids,
        RequestState.PENDING,
        from_states=ACTIVE_STATES,
        actor=actor,
        actor_name=actor_name,
        reason=reason,
        now=now,
    )


def _move(
    locked: list[GpuRequest],
    to_state: str,
    *,
    actor=None,
    actor_name: str = "",
    reasons: dict[int, str],
    now: dt.datetime | None = None,
) -> None:
    """Move rows already locked by the caller, with every consequence: stamps, the pending reason,
    slices closed when the request leaves the active states, events, live updates, a pass when
    capacity came free."""
    if not locked:
        return
    now = now or timezone.now()
    leaving = [r.pk for r in locked if r.state in ACTIVE_STATES and to_state not in ACTIVE_STATES]
    if leaving:
        Allocation.objects.committed().filter(request_id__in=leaving).update(ended_at=now)
    stamp = {RequestState.SCHEDULED: "scheduled_at", RequestState.RUNNING: "started_at"}.get(to_state)
    events = []
    for request in locked:
        from_state, request.state = request.state, to_state
        if stamp and getattr(request, stamp) is None:
            setattr(request, stamp, now)
        if request.is_terminal():
            request.ended_at = now
        request.pending_reason = reasons[request.pk][:300] if to_state == RequestState.PENDING else ""
        request.estimated_start_at = None
        events.append(
            build_event(
                request,
                to_state,
                from_state=from_state,
                actor=actor,
                actor_name=actor_name,
                reason=reasons[request.pk],
            )
        )
    GpuRequest.objects.bulk_update(
        locked,
        ["state", "scheduled_at", "started_at", "ended_at", "pending_reason", "estimated_start_at"],
        batch_size=500,
    )
    record_events(events)
    if leaving:
        schedule_soon()


def release_request(request: GpuRequest, *, user) -> GpuRequest:
    """The user is done with the capacity: running work ends succeeded; work that never started
    ends cancelled, and the event says so."""
    if not request.team.memberships.filter(user=user).exists():
        raise PermissionError("Only members of the request's team can release it.")
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        if not locked.is_active():
            raise StateConflict(f"A {locked.state} request holds no GPU to release; cancel it instead.")
        if locked.state == RequestState.SCHEDULED:
            to_state, reason = RequestState.CANCELLED, "released before it started running: cancelled"
        else:
            to_state, reason = RequestState.SUCCEEDED, "released by user"
        check_transition(locked.state, to_state)
        _move([locked], to_state, actor=user, reasons={locked.pk: reason})
    request.refresh_from_db()
    return request


def cancel_request(request: GpuRequest, *, user, reason: str = "cancelled by user") -> GpuRequest:
    """Stop a request at the user's wish: it ends cancelled and its slices close with it."""
    if not request.team.memberships.filter(user=user).exists():
        raise PermissionError("Only members of the request's team can cancel it.")
    return transition_request(request, RequestState.CANCELLED, actor=user, reason=reason)


@dataclass(frozen=True)
class PlannedStart:
    """Start a pending request on these slices (one per card of its gang), billed as `billing_mode`."""

    request_id: int
    slices: tuple[Slice, ...]
    billing_mode: str
    borrowed: bool = False
    note: str = ""


@dataclass
class Placed:
    """What `place` did: the requests now scheduled, and for each start it could not make, why."""

    started: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)


def place(starts: Sequence[PlannedStart], *, actor_name: str = "scheduler", now=None) -> Placed:
    """Give pending requests their slices and mark them scheduled: the one writer of allocations.

    Locks the cards (id order), then the requests (id order), and re-checks the
    committed capacity under those locks, so no card ever exceeds 1000 milli-GPU
    or its memory (DESIGN rule 1) whatever runs concurrently. A start that no
    longer fits, or whose request is no longer pending, is refused with the reason.
    """
    now = now or timezone.now()
    result = Placed()
    with transaction.atomic():
        gpu_ids = sorted({piece.gpu_id for start in starts for piece in start.slices})
        gpus = {
            gpu.pk: gpu
            for gpu in Gpu.objects.select_for_update(of=("self",))
            .filter(pk__in=gpu_ids)
            .select_related("node")
            .order_by("pk")
        }
        committed = Allocation.objects.committed_by_gpu(gpu_ids)
        pending = {
            r.pk: r
            for r in GpuRequest.objects.select_for_update(of=("self",))
            .filter(pk__in=[s.request_id for s in starts], state=RequestState.PENDING)
            .select_related("team")
            .order_by("pk")
        }
        allocations, reasons = [], {}
        for start in starts:
            request = pending.get(start.request_id)
            refusal = _refusal(request, start, gpus, committed)
            if refusal:
                result.refused[start.request_id] = refusal
                continue
            for piece in start.slices:
                milli, memory = committed.get(piece.gpu_id, (0, 0))
                committed[piece.gpu_id] = (milli + piece.milli, memory + piece.gpu_memory_mib)
            allocations += [
                Allocation(
                    request_id=request.pk,
                    gpu_id=piece.gpu_id,
                    milli=piece.milli,
                    gpu_memory_mib=piece.gpu_memory_mib,
                    billing_mode=start.billing_mode,
                    borrowed=start.borrowed,
                    started_at=now,
                )
                for piece in start.slices
            ]
            where = ", ".join(str(gpus[piece.gpu_id]) for piece in start.slices)
            reasons[request.pk] = f"placed on {where}{start.note}"
            result.started.append(request.pk)
        moving = [pending[pk] for pk in sorted(result.started)]
        _move(moving, RequestState.SCHEDULED, actor_name=actor_name, reasons=reasons, now=now)
        Allocation.objects.bulk_create(allocations)
    return result


def allocate(
    request: GpuRequest, slices: list[Slice], *, borrowed: bool = False, actor_name: str = "scheduler"
) -> list[Allocation]:
    """`place` for one pending request and its gang; OverCommitError (nothing written) when refused."""
    if request.state != RequestState.PENDING:
        raise StateConflict(f"A {request.state} request cannot be placed; only pending ones.")
    if len(slices) != request.num_gpus or len({s.gpu_id for s in slices}) != len(slices):
        raise ValidationError({"slices": f"{request.name} needs {request.num_gpus} distinct card(s)."})
    start = PlannedStart(request.pk, tuple(slices), request.billing_mode, borrowed)
    refused = place([start], actor_name=actor_name).refused
    if refused:
        raise OverCommitError(refused[request.pk])
    request.refresh_from_db()
    return list(Allocation.objects.committed().filter(request=request).order_by("gpu_id"))


def _refusal(request: GpuRequest | None, start: PlannedStart, gpus, committed) -> str:
    """Why `start` cannot be made under the locks just taken ("" when it can)."""
    if request is None:
        return "no longer pending"
    if len(start.slices) != request.num_gpus or len({s.gpu_id for s in start.slices}) != request.num_gpus:
        return f"{request.name} needs {request.num_gpus} distinct card(s)"
    for piece in start.slices:
        gpu = gpus.get(piece.gpu_id)
        if gpu is None:
            return f"no GPU with id {piece.gpu_id}"
        if not gpu.node.is_schedulable():
            return f"{gpu} is on a {gpu.node.status} node"
        milli, memory = committed.get(gpu.pk, (0, 0))
        if milli + piece.milli > MILLI_PER_GPU:
            return f"{gpu} has {MILLI_PER_GPU - milli} milli-GPU free, not {piece.milli}"
        if memory + piece.gpu_memory_mib > gpu.memory_mib:
            return f"{gpu} has {gpu.memory_mib - memory} MiB free, not {piece.gpu_memory_mib}"
    return ""


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
