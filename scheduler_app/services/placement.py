"""Giving pending requests their slices, under the cards' row locks: the one place new work starts
(services.segments writes the slices)."""

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from audit.events import log_event
from infra.conflicts import StateConflict
from scheduler_app.choices import MigMode, RequestState
from scheduler_app.constants import CARDS_EVENT, MILLI_PER_GPU
from scheduler_app.core.mig import LayoutError, parse_layout
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.segments import add_segments, reopen_segments
from scheduler_app.services.transitions import mark_scheduled


class OverCommitError(Exception):
    """A start would put a card over 1000 milli-GPU or over its memory, or use an unschedulable card."""


@dataclass(frozen=True)
class Slice:
    """A piece of one card for one request: milli-GPU and GPU memory (MiB)."""

    gpu_id: int
    milli: int
    gpu_memory_mib: int
    mig_instance: str = ""  # on a MIG card: the GPU instance held whole, profile@start
    mig_layout: str | None = None  # the card's new layout when the slice re-partitions or extends it


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
    """Give pending requests their slices and mark them scheduled: the one way work starts.

    Locks the cards (`_lock_cards`: their nodes first) and the requests, each in id order, and
    re-checks the committed capacity under those locks, so no card ever exceeds 1000
    milli-GPU or its memory (DESIGN rule 1) whatever runs concurrently, counting what work outside
    the portal holds (record_foreign_use writes it under the node's lock). A start that no longer
    fits, or whose request is no longer pending, is refused with the reason.
    """
    now = now or timezone.now()
    result = Placed()
    with transaction.atomic():
        gpus = _lock_cards({piece.gpu_id for start in starts for piece in start.slices})
        committed = Allocation.objects.committed_by_gpu(list(gpus))
        mig = MigCheck(gpus)
        pending = {
            row.pk: row
            for row in GpuRequest.objects.select_for_update()
            .filter(pk__in_array=[s.request_id for s in starts], state=RequestState.PENDING)
            .order_by("pk")
            .values_list("pk", "name", "num_gpus", "team_id", named=True)
        }
        allocations, reasons = [], {}
        for start in starts:
            request = pending.get(start.request_id)
            refusal = _refusal(request, start, gpus, committed) or mig.refusal(start.slices)
            if refusal:
                result.refused[start.request_id] = refusal
                continue
            for piece in start.slices:
                milli, memory = committed.get(piece.gpu_id, (0, 0))
                committed[piece.gpu_id] = (milli + piece.milli, memory + piece.gpu_memory_mib)
            mig.take(start.slices)
            allocations += [
                Allocation(
                    request_id=request.pk,
                    gpu_id=piece.gpu_id,
                    milli=piece.milli,
                    gpu_memory_mib=piece.gpu_memory_mib,
                    mig_instance=piece.mig_instance,
                    mig_slots=mig.slots(piece),
                    billing_mode=start.billing_mode,
                    borrowed=start.borrowed,
                    started_at=now,
                )
                for piece in start.slices
            ]
            where = ", ".join(
                str(gpus[piece.gpu_id]) + (f" MIG {piece.mig_instance}" if piece.mig_instance else "")
                for piece in start.slices
            )
            reasons[request.pk] = f"placed on {where}{start.note}"
            result.started.append(request.pk)
        team_of = {pk: pending[pk].team_id for pk in sorted(result.started)}
        mark_scheduled(team_of, actor_name=actor_name, reasons=reasons, now=now)
        mig.save_layouts()
        add_segments(allocations)
    return result


@dataclass(frozen=True)
class LockedCard:
    """A card as `place` locked it: what the re-check reads (a pass locks thousands, and loading each as
    a model cost more than locking it)."""

    pk: int
    node: Node
    index: int
    memory_mib: int
    foreign_milli: int
    foreign_memory_mib: int
    mig_layout: str

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"  # as Gpu's


def _lock_cards(gpu_ids: set[int]) -> dict[int, LockedCard]:
    """Share-lock the cards' nodes (a node being marked lost waits, or is waited for, so no slice lands on
    it unseen), then lock the cards, each in id order. No-key locks: enough to serialise writers of
    slices; readings (GpuSample) may still arrive."""
    ids = sorted(gpu_ids)
    node_ids = Gpu.objects.filter(pk__in_array=ids).values_list("node_id", flat=True).distinct()
    nodes = (
        Node.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk__in=list(node_ids))
        .annotate(mig_mode=F("pool__mig_mode"))
        .order_by("pk")
    )
    node_of = {node.pk: node for node in nodes}
    cards = (
        Gpu.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk__in_array=ids)
        .order_by("pk")
        .values_list(
            "pk", "node_id", "index", "memory_mib", "foreign_milli", "foreign_memory_mib", "mig_layout"
        )
    )
    return {pk: LockedCard(pk, node_of[node_id], *rest) for pk, node_id, *rest in cards}


def allocate(
    request: GpuRequest, slices: list[Slice], *, borrowed: bool = False, actor_name: str = "scheduler"
) -> list[Allocation]:
    """`place` for one pending request and its gang; OverCommitError (nothing written) when refused."""
    if request.state != RequestState.PENDING:
        raise StateConflict(f"A {request.state} request cannot be placed; only pending ones.")
    if gang_refusal := _gang_refusal(request, slices):
        raise ValidationError({"slices": f"{gang_refusal}."})
    start = PlannedStart(request.pk, tuple(slices), request.billing_mode, borrowed)
    refused = place([start], actor_name=actor_name).refused
    if refused:
        raise OverCommitError(refused[request.pk])
    request.refresh_from_db()
    return list(Allocation.objects.committed().filter(request=request).order_by("gpu_id"))


def follow_cards(
    node: Node, request_id: int, generation: int, indexes: Sequence[int], *, actor_name: str, now=None
) -> str:
    """The run `generation` of the request runs on these cards of `node` (by index), as its cluster
    manager chose them within the node: its open slices there move to them (closed, and reopened on
    the card at `now`), so the next pass plans on what runs. Under the node's share lock, the cards'
    and the request's row locks, like `place`; refused with the reason ("" when done or nothing to
    do) when a card would go over 1000 milli-GPU or its memory, or the run is no longer current."""
    now = now or timezone.now()
    with transaction.atomic():
        cards, request, held = _lock_run(node, request_id, generation)
        if request is None:
            return f"request {request_id} run {generation} is no longer current"
        wanted = [cards[i] for i in sorted(indexes) if i in cards]
        if len(wanted) != len(held) or any(piece.mig_instance for piece in held):
            return f"request {request_id} holds {len(held)} slice(s) here, not one on each of cards {indexes}"
        targets = iter(card for card in wanted if card.pk not in {piece.gpu_id for piece in held})
        moving = [piece for piece in held if piece.gpu_id not in {card.pk for card in wanted}]
        to_cards = {piece.pk: next(targets) for piece in moving}
        if not moving:
            return ""
        committed = Allocation.objects.committed_by_gpu([card.pk for card in to_cards.values()])
        for piece in moving:
            card = to_cards[piece.pk]
            milli, memory = committed.get(card.pk, (0, 0))
            if milli + piece.milli > MILLI_PER_GPU or memory + piece.gpu_memory_mib > card.memory_mib:
                return f"{card} has no room for request {request_id}'s {piece.milli} milli-GPU"
        reopen_segments(
            request,
            moving,
            billing_mode=moving[0].billing_mode,
            at=now,
            to_cards={pk: card.pk for pk, card in to_cards.items()},
        )
        where = ", ".join(str(c) for c in wanted)
        log_event(
            request,
            CARDS_EVENT,
            from_state=request.state,
            actor_name=actor_name,
            reason=f"runs on {where}, as {actor_name} chose within the node",
            data={"cards": [c.index for c in wanted], "node": node.name},
        )
    return ""


def _lock_run(node: Node, request_id: int, generation: int):
    """For following a cluster manager's choice within `node`: the node's share lock, its cards' and the
    request's row locks, as `place` takes them. (cards by index, the request, its open slices on the
    node); the request is None when the run `generation` is no longer current."""
    Node.objects.select_for_update(no_key=True).filter(pk=node.pk).first()
    locked = Gpu.objects.select_for_update(no_key=True).filter(node=node).order_by("pk")
    cards = {gpu.index: gpu for gpu in locked}
    request = (
        GpuRequest.objects.select_for_update()
        .filter(pk=request_id, placements=generation, state__in=ACTIVE_STATES)
        .first()
    )
    if request is None:
        return cards, None, []
    held = list(Allocation.objects.committed().filter(request=request, gpu__node=node).order_by("gpu_id"))
    return cards, request, held


def follow_instances(
    node: Node,
    request_id: int,
    generation: int,
    instances: Sequence[tuple[int, str]],
    *,
    actor_name: str,
    now=None,
) -> str:
    """`follow_cards` for MIG: the run `generation` of the request runs on these GPU instances of
    `node` ((card index, profile@start)), as its cluster manager chose them among instances of the same
    profile: its open slices there move to them (closed, and reopened there at `now`). Under the
    node's share lock, the cards' and the request's row locks; refused with the reason ("" when done
    or nothing to do) when an instance is not in its card's layout, is of another profile, is held by
    another slice, or the run is no longer current."""
    now = now or timezone.now()
    with transaction.atomic():
        cards, request, held = _lock_run(node, request_id, generation)
        if request is None:
            return f"request {request_id} run {generation} is no longer current"
        index_of = {gpu.pk: gpu.index for gpu in cards.values()}
        wanted = set(instances)
        if len(wanted) != len(held) or not all(piece.mig_instance for piece in held):
            return (
                f"request {request_id} holds {len(held)} slice(s) here, not one on each of {sorted(wanted)}"
            )
        if len({index for index, _ in wanted}) != len(wanted):
            return f"request {request_id} got two MIG instances of one card: {sorted(wanted)}"
        at = {piece.pk: (index_of[piece.gpu_id], piece.mig_instance) for piece in held}
        targets = iter(sorted(wanted - set(at.values())))
        moving = {piece.pk: (piece, next(targets)) for piece in held if at[piece.pk] not in wanted}
        if not moving:
            return ""
        for piece, (index, instance) in moving.values():
            if why := _instance_refusal(piece, cards.get(index), instance, list(moving)):
                return f"request {request_id}: {why}"
        reopen_segments(
            request,
            [piece for piece, _ in moving.values()],
            billing_mode=held[0].billing_mode,
            at=now,
            to_cards={pk: cards[index].pk for pk, (_, (index, _)) in moving.items()},
            to_instances={pk: instance for pk, (_, (_, instance)) in moving.items()},
        )
        where = ", ".join(f"{cards[index]} MIG {instance}" for index, instance in sorted(wanted))
        log_event(
            request,
            CARDS_EVENT,
            from_state=request.state,
            actor_name=actor_name,
            reason=f"runs on {where}, as {actor_name} chose within the node",
            data={
                "instances": [[index, instance] for index, instance in sorted(wanted)],
                "node": node.name,
            },
        )
    return ""


def _instance_refusal(piece: Allocation, card: Gpu | None, instance: str, moving: list[int]) -> str:
    """Why `piece` cannot move to `instance` of `card` ("" when it can)."""
    if card is None:
        return f"the node has no card for MIG instance {instance}"
    try:
        layout = {str(i): i for i in card.mig_instances()}
    except LayoutError as error:
        return f"{card}: invalid MIG layout ({error})"
    if instance not in layout:
        return f"{card} has no MIG instance {instance}"
    if instance.partition("@")[0] != piece.mig_instance.partition("@")[0]:
        return f"{card} MIG instance {instance} is not a {piece.mig_instance.partition('@')[0]}"
    taken = Allocation.objects.committed().filter(gpu=card, mig_instance=instance).exclude(pk__in=moving)
    if taken.exists():
        return f"{card} MIG instance {instance} is held by another slice"
    return ""


def _refusal(request, start: PlannedStart, gpus: dict[int, LockedCard], committed) -> str:
    """Why `start` cannot be made under the locks just taken ("" when it can); `request`: its locked
    row (pk, name, num_gpus), None when no longer pending."""
    if request is None:
        return "no longer pending"
    if gang_refusal := _gang_refusal(request, start.slices):
        return gang_refusal
    for piece in start.slices:
        gpu = gpus.get(piece.gpu_id)
        if gpu is None:
            return f"no GPU with id {piece.gpu_id}"
        if not gpu.node.is_schedulable():
            return f"{gpu} is on a {gpu.node.status} node"
        milli, memory = committed.get(gpu.pk, (0, 0))
        milli, memory = milli + gpu.foreign_milli, memory + gpu.foreign_memory_mib  # held outside the portal
        if milli + piece.milli > MILLI_PER_GPU:
            return f"{gpu} has {MILLI_PER_GPU - milli} milli-GPU free, not {piece.milli}"
        if memory + piece.gpu_memory_mib > gpu.memory_mib:
            return f"{gpu} has {gpu.memory_mib - memory} MiB free, not {piece.gpu_memory_mib}"
    return ""


def _gang_refusal(request, slices) -> str:
    """A gang takes one slice on each of num_gpus distinct cards ("" when the slices do)."""
    if len(slices) != request.num_gpus or len({piece.gpu_id for piece in slices}) != request.num_gpus:
        return f"{request.name} needs {request.num_gpus} distinct card(s)"
    return ""


class MigCheck:
    """The MIG half of the re-check under the cards' locks: a slice on a card of a MIG pool holds one
    whole instance of the card's layout (or of the new layout it brings), that no open slice holds,
    with exactly that instance's share and memory; a new layout keeps every instance in use."""

    def __init__(self, gpus: dict[int, LockedCard]) -> None:
        self.gpus = gpus
        self.mig_gpus = {pk for pk, gpu in gpus.items() if gpu.node.mig_mode}
        self.dynamic = {pk for pk, gpu in gpus.items() if gpu.node.mig_mode == MigMode.DYNAMIC}
        self.used: dict[int, set[str]] = {pk: set() for pk in self.mig_gpus}
        if self.mig_gpus:
            held = Allocation.objects.committed().filter(gpu_id__in=self.mig_gpus).exclude(mig_instance="")
            for gpu_id, instance in held.values_list("gpu_id", "mig_instance"):
                self.used[gpu_id].add(instance)
        self.layouts: dict[int, str] = {}  # new layouts to write

    def refusal(self, slices) -> str:
        for piece in slices:
            if piece.gpu_id not in self.mig_gpus:
                if piece.mig_instance:
                    return f"{self.gpus[piece.gpu_id]} is not in a MIG pool"
                continue
            if why := self._refusal(piece):
                return why
        return ""

    def _refusal(self, piece: Slice) -> str:
        gpu = self.gpus[piece.gpu_id]
        if not piece.mig_instance:
            return f"{gpu} is in MIG mode: a slice holds a whole GPU instance"
        if piece.mig_layout is not None and gpu.pk not in self.dynamic:
            return f"{gpu} has a fixed MIG layout: only operators change it"
        text = self.layouts.get(gpu.pk, gpu.mig_layout) if piece.mig_layout is None else piece.mig_layout
        try:
            layout = {str(i): i for i in parse_layout(text, gpu.memory_mib)}
        except LayoutError as error:
            return f"{gpu}: invalid MIG layout ({error})"
        used = self.used[gpu.pk]
        if missing := sorted(used - set(layout)):
            return f"{gpu} has MIG instance {missing[0]} in use: only an idle card is re-partitioned"
        instance = layout.get(piece.mig_instance)
        if instance is None:
            return f"{gpu} has no MIG instance {piece.mig_instance}"
        if piece.mig_instance in used:
            return f"{gpu} MIG instance {piece.mig_instance} is in use"
        profile = instance.profile
        if (piece.milli, piece.gpu_memory_mib) != (profile.milli, profile.memory_mib(gpu.memory_mib)):
            return (
                f"{gpu} MIG instance {piece.mig_instance} gives {profile.milli} milli-GPU, not {piece.milli}"
            )
        return ""

    def take(self, slices) -> None:
        for piece in slices:
            if piece.gpu_id in self.mig_gpus:
                self.used[piece.gpu_id].add(piece.mig_instance)
                if piece.mig_layout is not None:
                    self.layouts[piece.gpu_id] = piece.mig_layout

    def slots(self, piece: Slice) -> int | None:
        """The instance's memory slices, for the database guard (None outside MIG)."""
        if not piece.mig_instance:
            return None
        return parse_layout(piece.mig_instance, self.gpus[piece.gpu_id].memory_mib)[0].profile.memory

    def save_layouts(self) -> None:
        for gpu_id, layout in self.layouts.items():
            Gpu.objects.filter(pk=gpu_id).update(mig_layout=layout)
