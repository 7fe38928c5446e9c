"""A user's requests: submit (validated first), cancel, release."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from audit.events import log_event
from infra.conflicts import StateConflict
from infra.echo import echoed
from scheduler_app.choices import RequestState
from scheduler_app.models import Gpu, GpuRequest, Pool
from scheduler_app.passes.dispatch import schedule_soon
from scheduler_app.permissions import can_act_on, can_submit
from scheduler_app.rules.billing import billing
from scheduler_app.rules.lifecycle import AlreadyEnded, release_target
from scheduler_app.services.transitions import transition_request
from teams.environment import environment_problems
from teams.models import Team
from teams.permissions import require


def validated_request(*, user, team: Team | None, pool_name: str = "", **fields) -> GpuRequest:
    """An unsaved request, checked as submit_request checks it (ValidationError naming the field)."""
    errors: dict[str, str | list[str]] = {}
    if team is None:
        errors["team"] = "A request needs a team."
    elif not can_submit(user, team):
        errors["team"] = f"You are not a member of team {team.name}."
    pool = None
    if pool_name:
        pool = Pool.objects.filter(name=pool_name).first()
        if pool is None:
            errors["pool"] = f"No pool named {echoed(pool_name)!r}."
    if problems := environment_problems(fields.get("environment", {})):
        errors["environment"] = problems
    if errors:
        raise ValidationError(errors)

    request = GpuRequest(team=team, user=user, pool=pool, state=RequestState.PENDING, **fields)
    # Team, user and pool are rows in hand: full_clean need not query each one's existence again.
    held = [name for name, row in (("team", team), ("user", user), ("pool", pool)) if row is not None]
    request.full_clean(exclude=held, validate_constraints=False)
    _check_fits_some_gpu(request)
    billing().admit(request)
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
        raise ValidationError({"gpu_model": f"No GPU of model {echoed(request.gpu_model)!r}{where}."})
    if request.gpu_memory_mib and largest is not None and request.gpu_memory_mib > largest:
        raise ValidationError(
            {"gpu_memory_mib": f"No GPU has {request.gpu_memory_mib} MiB; the largest has {largest} MiB."}
        )


def release_request(request: GpuRequest, *, user, locked: bool = False) -> GpuRequest:
    """The user is done with the capacity: running (or migrating) work ends released, its own outcome
    (neither succeeded nor failed: the user stopped it); work that never started ends cancelled, and the
    event says so. `locked`: the caller read `request` with its row lock
    in the transaction it has open, so the row is not read again."""
    require(can_act_on(user, request), "Only members of the request's team can release it.")
    # A caller that locked the row rolls its own transaction back on a refusal: no savepoint for it.
    with transaction.atomic(savepoint=not locked):
        row = request if locked else GpuRequest.objects.select_for_update().get(pk=request.pk)
        if row.is_terminal():
            raise AlreadyEnded(row.pk, row.state)
        to_state = release_target(row.state)
        if to_state is None:
            raise StateConflict(f"A {row.state} request holds no GPU to release; cancel it instead.")
        if to_state == RequestState.CANCELLED:
            reason = "released before it started running: cancelled"
        else:
            reason = "released by user"
        return transition_request(request, to_state, locked=row, actor=user, reason=reason)


def cancel_request(
    request: GpuRequest, *, user, reason: str = "cancelled by user", locked: bool = False
) -> GpuRequest:
    """Stop a request at the user's wish: it ends cancelled and its slices close with it. One that has
    already ended raises AlreadyEnded, naming its state. `locked` as for release_request."""
    require(can_act_on(user, request), "Only members of the request's team can cancel it.")
    with transaction.atomic(savepoint=not locked):
        row = request if locked else GpuRequest.objects.select_for_update().get(pk=request.pk)
        if row.is_terminal():
            raise AlreadyEnded(row.pk, row.state)
        return transition_request(request, RequestState.CANCELLED, locked=row, actor=user, reason=reason)
