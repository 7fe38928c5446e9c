"""Consolidation: the fewest moves of running work after which a request that fits nowhere fits.

A request can wait although its pool has enough free share in total: the share is scattered over
cards and nodes, none of which has room for it (fragmentation). Moving a few running requests to other
cards can make the room. The planner looks, node by node, for the fewest movable residents whose
leaving lets the request fit there (`_freeing`), then checks the plan on the whole cluster with the
placer: the residents leave, the request is placed, and each resident is placed again by the policy,
anywhere but on the room just made. Candidates are tried by number of moves, then GPU share moved.

Per card the fewest residents are found by taking the largest shares first, which is the fewest for
the share; with memory or host CPU also short, more may be taken than the fewest possible. For a gang
of whole cards, the cards with the fewest residents are freed. MIG cards are left out: their instances
follow their own layouts (core/mig.py).

Plain data, no clock: the caller says which residents may move (a checkpoint interval, not pinned,
not moved within the last interval) and how many moves a plan may hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .cluster import MILLI_PER_GPU, NodeState, Placement, RequestSpec
from .placement.placer import Placer

CANDIDATES_TRIED = 8  # rooms checked on the whole cluster, fewest moves first, before giving up


@dataclass(frozen=True, slots=True)
class Resident:
    """A running request where it runs; `movable`: the caller allows moving it."""

    request: RequestSpec
    placement: Placement
    movable: bool = True


@dataclass(frozen=True, slots=True)
class Move:
    """Resident number `resident` (of those given) goes to `to`."""

    resident: int
    to: Placement


@dataclass(frozen=True, slots=True)
class Plan:
    """The moves, and where the waiting request goes once they are made."""

    moves: tuple[Move, ...]
    placement: Placement


def fragmented(placer: Placer, request: RequestSpec) -> bool:
    """The request fits nowhere, though the free share of the nodes it may use adds up to what it asks."""
    if request.num_gpus == 0 or placer.fits(request):
        return False
    free = sum(
        gpu.free_milli
        for node in placer.index.nodes
        if not request.pools or node.pool in request.pools
        for gpu in node.gpus
        if not request.models or gpu.model in request.models
    )
    return free >= request.total_milli()


def plan_moves(
    placer: Placer,
    request: RequestSpec,
    residents: Sequence[Resident],
    max_moves: int,
    accept: Callable[[Plan], bool] = lambda plan: True,
) -> Plan | None:
    """The fewest moves (at most `max_moves`) of movable residents after which `request` fits, among the
    plans `accept` allows (the caller's bounds); None when no such plan is found. The placer's state is
    as it was afterwards."""
    if max_moves < 1 or request.num_gpus == 0:
        return None
    on_node: dict[str, list[int]] = {}
    for k, resident in enumerate(residents):
        on_node.setdefault(resident.placement.node, []).append(k)
    candidates = []
    for order, node in enumerate(placer.index.nodes):
        leaving = _freeing(node, request, [(k, residents[k]) for k in on_node.get(node.name, [])])
        if leaving and len(leaving) <= max_moves:
            moved_milli = sum(residents[k].request.total_milli() for k in leaving)
            candidates.append((len(leaving), moved_milli, order, leaving))
    for *_, leaving in sorted(candidates)[:CANDIDATES_TRIED]:
        plan = _try(placer, request, residents, leaving)
        if plan is not None and accept(plan):
            return plan
    return None


def _freeing(node: NodeState, request: RequestSpec, here: list[tuple[int, Resident]]) -> list[int] | None:
    """The fewest residents of `node` (numbers) whose leaving makes room there for `request`; None when
    none would do, or when it fits already."""
    if any(gpu.mig is not None for gpu in node.gpus) or (request.pools and node.pool not in request.pools):
        return None
    usable = [g.index for g in node.gpus if not request.models or g.model in request.models]
    on_card = {i: [(k, r) for k, r in here if i in r.placement.gpus] for i in usable}
    if request.num_gpus == 1:
        options = [_card_room(node, request, i, on_card[i]) for i in usable]
    else:
        options = [_cards_room(node, request, usable, on_card)]
    best = None
    for leaving in options:
        if leaving is None:
            continue
        leaving = _host_room(node, request, here, leaving)
        if leaving and (best is None or len(leaving) < len(best)):
            best = leaving
    return best


def _card_room(node: NodeState, request: RequestSpec, index: int, residents) -> list[int] | None:
    gpu = node.gpus[index]
    milli, memory, need = gpu.free_milli, gpu.free_memory_mib, request.memory_on(gpu)
    leaving = []
    for k, resident in sorted(residents, key=lambda kr: -kr[1].placement.milli):
        if milli >= request.gpu_milli and memory >= need:
            break
        if not resident.movable:
            continue
        leaving.append(k)
        milli += resident.placement.milli
        memory += resident.placement.gpu_memory_mib
    return leaving if milli >= request.gpu_milli and memory >= need else None


def _cards_room(node: NodeState, request: RequestSpec, usable: list[int], on_card) -> list[int] | None:
    """A gang of whole cards: the cards whose residents are fewest, all of them movable."""
    clear = [i for i in usable if all(r.movable for _, r in on_card[i])]
    clear.sort(key=lambda i: (node.gpus[i].free_milli < MILLI_PER_GPU, len(on_card[i]), i))
    if len(clear) < request.num_gpus:
        return None
    leaving = {k for i in clear[: request.num_gpus] for k, _ in on_card[i]}
    return sorted(leaving)


def _host_room(node: NodeState, request: RequestSpec, here, leaving: list[int]) -> list[int] | None:
    """`leaving`, with more of the node's movable residents (most CPU first) while its host CPU or
    memory is short; None when that cannot be made."""
    gone = {k: r for k, r in here if k in leaving}
    cpu = node.free_cpu_milli + sum(r.request.cpu_milli for r in gone.values())
    memory = node.free_memory_mib + sum(r.request.memory_mib for r in gone.values())
    for k, resident in sorted(here, key=lambda kr: -kr[1].request.cpu_milli):
        if cpu >= request.cpu_milli and memory >= request.memory_mib:
            break
        if k in gone or not resident.movable:
            continue
        gone[k] = resident
        cpu += resident.request.cpu_milli
        memory += resident.request.memory_mib
    return sorted(gone) if cpu >= request.cpu_milli and memory >= request.memory_mib else None


def _try(
    placer: Placer, request: RequestSpec, residents: Sequence[Resident], leaving: list[int]
) -> Plan | None:
    """The plan with these residents leaving, checked on the whole cluster; the placer is left as it was."""
    for k in leaving:
        placer.release(residents[k].request, residents[k].placement)
    placed = []
    try:
        target = placer.place(request)
        if target is None:
            return None
        placed.append((request, target))
        moves = []
        for k in leaving:
            to = placer.place(residents[k].request)
            if to is None:
                return None
            placed.append((residents[k].request, to))
            if (to.node, to.gpus) != (residents[k].placement.node, residents[k].placement.gpus):
                moves.append(Move(k, to))
        return Plan(tuple(moves), target)
    finally:
        for spec, placement in reversed(placed):
            placer.release(spec, placement)
        for k in leaving:
            placer.apply(residents[k].request, residents[k].placement)
