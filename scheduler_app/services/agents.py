"""What a node's agent reports: its cards, its jobs starting and ending, their output and the watchdog.

Every call acts for one node (the holder of its credential) and only on requests that hold, or
held, a slice of that node: anything else is NotOnThisNode (404), never another node's work.
Reports are idempotent: an agent retries after a lost answer, so a repeated "started" or
"finished" changes nothing and is not an error.
"""

import datetime as dt
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Sum
from django.db.models.functions import Length
from django.http import Http404
from django.utils import timezone

from audit.events import log_event
from audit.models import Event
from scheduler_app.choices import Backend, IsolationMode, RequestState
from scheduler_app.constants import (
    CHECKPOINT_EVENT,
    EXIT_CODE_RANGE,
    LOG_CHUNK_MAX_CHARS,
    LOG_MAX_CHARS_PER_REQUEST,
    MAX_GPUS_PER_NODE,
)
from scheduler_app.models import Allocation, Gpu, GpuRequest, LogChunk, Node
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.inventory import AGENT
from scheduler_app.services.log_masking import mask_secrets
from scheduler_app.services.migration import move_reasons, requeue_from_checkpoint
from scheduler_app.services.segments import start_open_segments_at
from scheduler_app.services.transitions import stop_gracefully, transition_request
from teams.selectors import secret_values

MAX_CLOCK_SKEW_S = 60  # a report's time further ahead of the portal's clock is refused
MIG_MODES = ("enabled", "disabled", "unsupported")


class NotOnThisNode(Http404):
    """The request never held a slice of the reporting node (or does not exist): the same answer."""


def checkpoint_dir(request: GpuRequest) -> str:
    """The job's checkpoint directory: one per request under CHECKPOINT_ROOT, so it survives a requeue."""
    return f"{settings.CHECKPOINT_ROOT.rstrip('/')}/{request.team.slug}/request-{request.pk}"


def reconcile_gpus(node: Node, cards: Sequence[Mapping]) -> dict[str, list[str]]:
    """Make the node's cards what NVML on it reports: new UUIDs are added, known ones take the
    reported model, memory and MIG mode. Returns the UUIDs added, updated and not reported.

    A card not reported is kept (it may hold work; an operator decides) and named in the answer
    and the node's log. Checked first, nothing written on any error: a UUID of another node, a
    card reported smaller than the memory its open slices hold.
    """
    with transaction.atomic():
        Node.objects.select_for_update().get(pk=node.pk)
        known = {gpu.uuid: gpu for gpu in Gpu.objects.filter(node=node)}
        _check_cards(node, cards, known)
        added, updated = [], []
        next_index = (max((gpu.index for gpu in known.values()), default=-1)) + 1
        for card in cards:
            fields = {
                "model": card["model"],
                "memory_mib": card["memory_mib"],
                "mig_capable": card["mig_mode"] != "unsupported",
                "mig_enabled": card["mig_mode"] == "enabled",
            }
            gpu = known.get(card["uuid"])
            if gpu is None:
                Gpu.objects.create(node=node, index=next_index, uuid=card["uuid"], **fields)
                next_index += 1
                added.append(card["uuid"])
            elif any(getattr(gpu, name) != value for name, value in fields.items()):
                Gpu.objects.filter(pk=gpu.pk).update(**fields)
                updated.append(card["uuid"])
        reported = {card["uuid"] for card in cards}
        missing = sorted(uuid for uuid in known if uuid not in reported)
        if added or updated or missing:
            reason = f"agent reported {len(cards)} cards: {len(added)} new, {len(updated)} changed"
            if missing:
                reason += f", not reported: {', '.join(missing)}"
            data = {"added": added, "updated": updated, "missing": missing}
            log_event(node, "gpus reconciled", actor_name=AGENT, reason=reason, data=data)
    return {"added": added, "updated": updated, "missing": missing}


def match_cards(node: Node, cards: Sequence[Mapping]) -> dict[str, list[str]]:
    """The cards an agent reports, read against the node's: the names the portal knows them by (`cards`,
    in the order reported; the agent reports its readings under them), and on an agent's node the
    changes reconcile_gpus made (`added`, `updated`, `missing`).

    On a node of a Slurm pool the cards are the Slurm sync's (one per gpu gres, named by its index):
    an agent there only watches, and changes none. The agent's i-th card is Slurm's card of index i
    (the order of gres.conf's device files, which NVML's follows); "" names a reported card Slurm has
    no card for, and `missing` the node's cards beyond those reported.
    """
    if node.pool.backend != Backend.SLURM:
        changes = reconcile_gpus(node, cards)
        return {**changes, "cards": [card["uuid"] for card in cards]}
    slurm_cards = list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", flat=True))
    named = [slurm_cards[i] if i < len(slurm_cards) else "" for i in range(len(cards))]
    return {"added": [], "updated": [], "missing": slurm_cards[len(cards) :], "cards": named}


def record_isolation(node: Node, isolation: Mapping | None) -> Node:
    """Keep how the node's agent runs jobs, as it reported at registration: {mode, namespaces, cgroup}
    (mode isolated or unisolated, namespaces a bool, cgroup v2, v1 or none); None, from an agent that
    does not report it, is unknown. A change is logged on the node, so operators see when and how a
    node's isolation weakened or returned."""
    if isolation is None:
        isolation = {"mode": IsolationMode.UNKNOWN, "namespaces": None, "cgroup": ""}
    fields = {f"isolation_{key}": isolation[key] for key in ("mode", "namespaces", "cgroup")}
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if all(getattr(locked, name) == value for name, value in fields.items()):
            return locked
        before = locked.isolation_label()
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.save(update_fields=list(fields))
        after = locked.isolation_label()
        log_event(
            locked,
            "isolation changed",
            actor_name=AGENT,
            reason=f"agent registered: {after}",
            data={"isolation": {"from": before, "to": after}},
        )
    return locked


def _check_cards(node: Node, cards: Sequence[Mapping], known: dict[str, Gpu]) -> None:
    errors: dict[str, list[str]] = {}
    if not cards:
        errors["gpus"] = ["Report at least one card."]
    elif len(cards) > MAX_GPUS_PER_NODE:
        errors["gpus"] = [f"At most {MAX_GPUS_PER_NODE} cards per node."]
    uuids = [card["uuid"] for card in cards]
    elsewhere = dict(Gpu.objects.filter(uuid__in=uuids).exclude(node=node).values_list("uuid", "node__name"))
    held = dict(
        Allocation.objects.committed()
        .filter(gpu__node=node)
        .values("gpu__uuid")
        .annotate(mem=Sum("gpu_memory_mib"))
        .values_list("gpu__uuid", "mem")
    )
    seen: set[str] = set()
    for index, card in enumerate(cards):
        uuid = card["uuid"]
        if uuid in seen:
            errors.setdefault(f"gpus[{index}].uuid", []).append(f"{uuid} appears twice.")
        seen.add(uuid)
        if uuid in elsewhere:
            errors.setdefault(f"gpus[{index}].uuid", []).append(
                f"{uuid} is a card of node {elsewhere[uuid]}, not {node.name}."
            )
        if held.get(uuid, 0) > card["memory_mib"]:
            errors.setdefault(f"gpus[{index}].memory_mib", []).append(
                f"Open slices on {uuid} hold {held[uuid]} MiB; "
                f"the card cannot have only {card['memory_mib']} MiB."
            )
    if errors:
        raise ValidationError(errors)


def _own_request(node: Node, request_id: int) -> GpuRequest:
    """The request if it ever held a slice of `node`; NotOnThisNode otherwise (no hint that it exists)."""
    request = GpuRequest.objects.filter(pk=request_id, allocations__gpu__node=node).distinct().first()
    if request is None:
        raise NotOnThisNode(f"Request {request_id} has no slice on node {node.name}.")
    return request


def _runs_here(node: Node, request: GpuRequest, generation: int | None = None) -> bool:
    """The request's current run is on this node (and is run `generation`, when the report names one:
    a late report of an earlier run, here or elsewhere, must not touch the new one)."""
    if generation is not None and generation != request.placements:
        return False
    return Allocation.objects.committed().filter(request=request, gpu__node=node).exists()


def report_started(
    node: Node,
    request_id: int,
    generation: int | None = None,
    resumed_from: dt.datetime | None = None,
    started_at: dt.datetime | None = None,
) -> GpuRequest:
    """The job's process started: scheduled becomes running. Already running: nothing changes.
    `resumed_from`: the checkpoint the run found in its checkpoint directory when it started (None:
    none, it starts from the beginning), recorded on the event for the resume rule
    (scheduler_app.rules.invariants.unresumed_moves). `started_at`: when a cluster manager that may
    hold a job pending after the portal placed it (Slurm) started it; the run is billed from then
    (segments.start_open_segments_at), never before its placement nor after now.

    A request no longer placed on this node (released, requeued, moved) is left as it is: the
    agent learns from its work list that the job must stop.
    """
    request = _own_request(node, request_id)
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        if locked.state == RequestState.SCHEDULED and _runs_here(node, locked, generation):
            resumed = {"resumed_from": resumed_from.isoformat() if resumed_from else None}
            if started_at is not None:
                start_open_segments_at(locked.pk, min(started_at, timezone.now()))
            return transition_request(
                locked, RequestState.RUNNING, actor_name=AGENT, reason="process started", data=resumed
            )
    return locked


def report_finished(
    node: Node,
    request_id: int,
    exit_code: int,
    generation: int | None = None,
    stopped_at: dt.datetime | None = None,
    host_memory_exceeded_mib: int | None = None,
    failed_because: str = "",
) -> GpuRequest:
    """The job's process ended: exit status 0 is succeeded, anything else failed; the status is kept.
    `stopped_at`: when it ended, as the agent saw it (see stop_time); a report comes up to a round later.
    `host_memory_exceeded_mib`: its cgroup's memory limit (MiB) killed it; it fails saying so, whatever
    its status, and even while it was being moved: the kill is the job's own end, not a stop for the
    move, and a requeue would run it into the same limit again. `failed_because`: a cluster manager's
    own word on why it ended the job (Slurm's TIMEOUT, a cancel outside the portal): it fails with that
    reason, whatever its status, unless it was stopped for a move.

    A request that had already ended (released, cancelled, stopped by the watchdog) keeps its state
    and takes the exit status if it has none; one that left this node (requeued, moved) is left as
    it is. A repeated report changes nothing.
    """
    low, high = EXIT_CODE_RANGE
    errors = {}
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not low <= exit_code <= high:
        errors["exit_code"] = f"Give the exit status as a whole number from {low} to {high}."
    limit = host_memory_exceeded_mib
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        errors["host_memory_exceeded_mib"] = "Give the limit that killed it in whole MiB, 1 or more."
    if errors:
        raise ValidationError(errors)
    ended = stop_time(stopped_at) if stopped_at else None
    if limit is not None:
        reason = f"exceeded its host memory limit ({limit} MiB)"
        return _end_here(
            node,
            request_id,
            RequestState.FAILED,
            reason,
            exit_code=exit_code,
            generation=generation,
            at=ended,
        )
    outcome = RequestState.SUCCEEDED if exit_code == 0 and not failed_because else RequestState.FAILED
    if stopped := _stopped_for_move(node, request_id, generation, stopped_at):
        return stopped
    reason = failed_because or exit_reason(exit_code)
    return _end_here(node, request_id, outcome, reason, exit_code=exit_code, generation=generation, at=ended)


def stop_time(reported: dt.datetime | None, now: dt.datetime | None = None) -> dt.datetime:
    """When a reported stop counts from: the agent's time, no later than now and no earlier than the
    metering settle time ago (metering may have billed the open slice up to there already)."""
    now = now or timezone.now()
    if reported is None:
        return now
    return min(now, max(reported, now - dt.timedelta(seconds=settings.METERING_SETTLE_S)))


def _stopped_for_move(
    node: Node, request_id: int, generation: int | None, reported: dt.datetime | None
) -> GpuRequest | None:
    """A job that ends while it is being moved (migrating, on this node) stopped for the move, whatever
    its status: requeued from its checkpoint, its slices closed at its stop time. None when the request
    is not being moved from here, or when the agent saw the job exit before the move began: that exit
    is the job's own end (it finished, or failed, before it was told to stop), not a stop to move."""
    request = _own_request(node, request_id)
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        if locked.state != RequestState.MIGRATING or not _runs_here(node, locked, generation):
            return None
        if reported is not None and reported < _move_began(locked):
            return None
        requeue_from_checkpoint([locked.pk], stopped_at=stop_time(reported), actor_name=AGENT)
    locked.refresh_from_db()
    return locked


def _move_began(request: GpuRequest) -> dt.datetime:
    """When the request was told to checkpoint and stop: its latest move to migrating."""
    return (
        Event.objects.filter(
            content_type=ContentType.objects.get_for_model(GpuRequest),
            object_id=request.pk,
            to_state=RequestState.MIGRATING,
        )
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    ) or timezone.now()


def record_checkpoint(
    node: Node,
    request_id: int,
    at: dt.datetime,
    *,
    ref: str = "",
    generation: int | None = None,
    now: dt.datetime | None = None,
) -> GpuRequest:
    """The job on `node` checkpointed at `at` (its agent saw the marker file change): the request keeps
    the time and where the data is (`ref`, default its checkpoint directory). An older or repeated
    report changes nothing. Work due to move at its next checkpoint starts moving now."""
    now = now or timezone.now()
    if at > now + dt.timedelta(seconds=MAX_CLOCK_SKEW_S):
        raise ValidationError({"at": "The checkpoint time is in the future; check the node's clock."})
    request = _own_request(node, request_id)
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().select_related("team").get(pk=request.pk)
        if not _runs_here(node, locked, generation):
            raise NotOnThisNode(f"Request {request_id} no longer runs on node {node.name}.")
        if locked.last_checkpoint_at and at <= locked.last_checkpoint_at:
            return locked
        locked.last_checkpoint_at, locked.checkpoint_ref = at, ref or checkpoint_dir(locked)
        locked.save(update_fields=["last_checkpoint_at", "checkpoint_ref"])
        log_event(
            locked,
            CHECKPOINT_EVENT,
            from_state=locked.state,
            actor_name=AGENT,
            reason=f"checkpointed at {at:%H:%M:%S} UTC to {locked.checkpoint_ref}",
            data={"at": at.isoformat(), "ref": locked.checkpoint_ref},
        )
        if locked.state == RequestState.RUNNING and (why := move_reasons([locked.pk]).get(locked.pk)):
            deadline = now + dt.timedelta(seconds=settings.MOVE_AT_CHECKPOINT_GRACE_S)
            stop_gracefully([locked.pk], deadline=deadline, reason=why, actor_name=AGENT, now=now)
            locked.refresh_from_db()
    return locked


def _end_here(
    node: Node,
    request_id: int,
    outcome: str,
    reason: str,
    *,
    exit_code: int | None = None,
    generation: int | None = None,
    at: dt.datetime | None = None,
):
    """End the request as `outcome` if it is running (or about to) on this node; see report_finished.
    `at`: when the process ended (its slices close then, so it is billed until its end, not until the
    report), never before the request started or was placed."""
    request = _own_request(node, request_id)
    with transaction.atomic():
        locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        if generation is not None and generation != locked.placements:
            return locked  # a report of an earlier run: the current one is not touched
        if locked.is_terminal():
            if exit_code is not None and locked.exit_code is None:
                GpuRequest.objects.filter(pk=locked.pk).update(exit_code=exit_code)
                locked.exit_code = exit_code
            return locked
        if locked.state not in ACTIVE_STATES or not _runs_here(node, locked):
            return locked
        if locked.state == RequestState.SCHEDULED and outcome == RequestState.SUCCEEDED:
            # It ended before its "started" got through: it did run.
            transition_request(locked, RequestState.RUNNING, actor_name=AGENT, reason="process started")
        if exit_code is not None:
            GpuRequest.objects.filter(pk=locked.pk).update(exit_code=exit_code)
        if at is not None:
            at = max(at, locked.started_at or at, locked.scheduled_at or at)
        return transition_request(locked, outcome, actor_name=AGENT, reason=reason, now=at)


def exit_reason(exit_code: int) -> str:
    if exit_code < 0:
        return f"process killed by signal {-exit_code}"
    return f"process exited with status {exit_code}"


def append_log(node: Node, request_id: int, offset: int, text: str) -> int:
    """Store one piece of the job's output at its character offset; returns the log's end offset.

    A piece sent again (same offset) is stored once. Beyond LOG_MAX_CHARS_PER_REQUEST the oldest
    pieces are dropped, like a bounded `kubectl logs` buffer. The team's secrets are masked before
    anything is stored (see _mask_secrets).
    """
    errors = {}
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        errors["offset"] = ["Give the character offset of the text in the job's output, 0 or more."]
    if not isinstance(text, str) or not text:
        errors["text"] = ["Give the output as a non-empty string."]
    elif len(text) > LOG_CHUNK_MAX_CHARS:
        errors["text"] = [f"At most {LOG_CHUNK_MAX_CHARS} characters per report; send the rest in pieces."]
    elif "\x00" in text:
        errors["text"] = ["The output cannot hold NUL characters."]
    if errors:
        raise ValidationError(errors)
    request = _own_request(node, request_id)
    with transaction.atomic():
        GpuRequest.objects.select_for_update().get(pk=request.pk)
        piece = LogChunk(request=request, node=node, offset=offset, text=text)
        rewritten = _mask_secrets(request, piece)
        LogChunk.objects.bulk_create([piece], ignore_conflicts=True)
        LogChunk.objects.bulk_update(rewritten, ["text"])
        _trim_log(request)
        end = LogChunk.objects.filter(request=request).aggregate(end=Max("offset"))["end"]
    return max(end or 0, offset + len(text))


def _mask_secrets(request: GpuRequest, piece: LogChunk) -> list[LogChunk]:
    """Mask the team's secrets in the new piece, and in the stored pieces next to it where a secret runs
    across the boundary (each starred to the same length, so every offset stays valid); returns the
    stored pieces to write back. Until the piece after it arrives, a stored piece may end with the
    start of a secret: only the whole value is known to be one."""
    secrets = secret_values([request.team_id]).get(request.team_id, {}).values()
    if not secrets:
        return []
    reach = max(len(secret) for secret in secrets) - 1  # how far an occurrence can run past the piece
    start, end = piece.offset - reach, piece.offset + len(piece.text) + reach
    near = [
        chunk
        for chunk in LogChunk.objects.filter(
            request=request, offset__gte=start - LOG_CHUNK_MAX_CHARS, offset__lt=end
        )
        if chunk.end() > start
    ]
    changed = mask_secrets([*near, piece], secrets)
    return [chunk for chunk in changed if chunk is not piece]


def _trim_log(request: GpuRequest) -> None:
    chunks = LogChunk.objects.filter(request=request).annotate(size=Length("text"))
    if (chunks.aggregate(total=Sum("size"))["total"] or 0) <= LOG_MAX_CHARS_PER_REQUEST:
        return
    total, drop = 0, []
    for pk, size in chunks.order_by("-offset").values_list("pk", "size"):
        total += size
        if total > LOG_MAX_CHARS_PER_REQUEST:
            drop.append(pk)
    LogChunk.objects.filter(pk__in=drop).delete()


def report_memory_exceeded(
    node: Node, request_id: int, *, uuid: str, used_mib: int, limit_mib: int
) -> GpuRequest:
    """The agent's watchdog is stopping the job for using more GPU memory than its slice: the request
    fails with a reason that says so (its exit status follows in the "finished" report)."""
    request = _own_request(node, request_id)
    if not Allocation.objects.filter(request=request, gpu__node=node, gpu__uuid=uuid).exists():
        raise ValidationError({"uuid": f"{uuid!r} is not a card request {request_id} holds on {node.name}."})
    reason = f"stopped: used {used_mib} MiB of GPU memory above its slice of {limit_mib} MiB"
    return _end_here(node, request_id, RequestState.FAILED, reason)
