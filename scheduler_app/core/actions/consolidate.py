"""Step *consolidate*: a request that fits nowhere only because the free share is scattered waits for a
few running jobs to move at their next checkpoint (``core/consolidation.py`` plans the moves), with the
room they leave reserved for it.

The bounds: only the movable work the caller names, at most `max_moves` new moves and `tries` requests
looked at per pass, no move that would put a job within its team's quota where it would borrow, and
no plan that touches a node holding another request's reservation. An open plan is
kept while its request still waits for it; once its moves are made, the request starts first in the
next pass, before the moved jobs (back in the queue) could take the room back.
"""

from __future__ import annotations

from ..cluster import Placement, RequestSpec
from ..consolidation import Plan, Resident, fragmented, plan_moves
from ..pass_plan import OpenRoom, Room, RunningAllocation, Waiting
from ..placement import Placer, gpu_fits, node_admits, release_placement
from ..queue_reservations import copy_node
from . import start
from .work import PassWork


def start_made_rooms(work: PassWork) -> set[int | str]:
    """Start, ahead of the queue, each request whose open plan has made all its moves and that fits;
    return their ids (the queue skips them)."""
    rules, started = work.consolidation, set()
    if rules is None or not rules.open:
        return started
    pending = {r.id: r for r in work.pending if r.id in rules.open}
    for request_id, room in rules.open.items():
        request = pending.get(request_id)
        if request is not None and not room.moving and start.try_start(work, request):
            started.add(request_id)
    return started


def wait_for_room(work: PassWork, request: RequestSpec) -> bool:
    """Leave a blocked request waiting for moves that make room for it (its open plan, or a new one
    within the bounds); False when there is none, and nothing changed."""
    rules = work.consolidation
    if rules is None:
        return False
    room = rules.open.get(request.id)
    if room is not None and room.moving and _room_holds(work, request, room):
        _hold(work, request, room.moving, room.placement, room.ready_at, new=False)
        return True
    moves_left = rules.max_moves - work.moves_planned
    pools = work.allowed(request) & rules.pools
    if (
        moves_left < 1
        or not pools
        or not rules.movable
        or request.num_gpus == 0
        or work.rooms_tried >= rules.tries
        or work.fits_now(request)
    ):
        return False
    work.rooms_tried += 1
    found = _plan(work, request, pools, moves_left)
    if found is None:
        return False
    moving, placement, ready_at = found
    work.moves_planned += len(moving)
    _hold(work, request, moving, placement, ready_at, new=True)
    return True


def _room_holds(work: PassWork, request: RequestSpec, room: OpenRoom) -> bool:
    """Whether the request still fits on its room's cards once the jobs still to move have left, on a
    node no other reservation claims."""
    target = room.placement
    if target.node not in work.by_name or work.book.claims_on(target.node):
        return False
    node = copy_node(work.by_name[target.node])
    for allocation in work.running:
        if allocation.request.id in room.moving and allocation.placement.node == target.node:
            release_placement(node, allocation.request, allocation.placement)
    cards = [node.gpus[i] for i in target.gpus if i < len(node.gpus)]
    return (
        len(cards) == len(target.gpus)
        and node_admits(request, node)
        and all(card.mig is None and gpu_fits(request, card) for card in cards)
    )


def _plan(
    work: PassWork, request: RequestSpec, pools: frozenset[str], moves_left: int
) -> tuple[tuple[int | str, ...], Placement, float] | None:
    """(moving ids, the request's placement, ready_at) of the fewest moves that make room, or None. The
    nodes another request's reservation claims are left out: no work moves to, from or onto them."""
    nodes = [copy_node(n) for n in work.nodes if n.pool in pools and not work.book.claims_on(n.name)]
    placer = Placer(nodes, work.policy, work.workload)
    if not fragmented(placer, request):
        return None
    names = {n.name for n in nodes}
    gone = {p.allocation.request.id for p in work.plan.preemptions}
    running = [
        a for a in work.running if a.placement.node in names and a.request.id not in gone and a.placement.gpus
    ]
    movable = work.consolidation.movable
    residents = [Resident(a.request, a.placement, a.request.id in movable) for a in running]
    plan = plan_moves(
        placer, request, residents, moves_left, lambda plan: not _breaks_a_quota(work, plan, running)
    )
    if plan is None or not plan.moves:
        return None
    moving = tuple(running[m.resident].request.id for m in plan.moves)
    return moving, plan.placement, max(movable[i] for i in moving)


def _breaks_a_quota(work: PassWork, plan: Plan, running: list[RunningAllocation]) -> bool:
    """Whether the plan moves a job within its team's quota to a pool where it would borrow: a job keeps
    its guarantee wherever it is moved. Borrowed work may move anywhere."""
    pool_of = work.ledger.pool_of
    for move in plan.moves:
        allocation = running[move.resident]
        if allocation.borrowed or pool_of[move.to.node] == pool_of[allocation.placement.node]:
            continue
        if work.ledger.is_borrowed(allocation.request, move.to.node):
            return True
    return False


def _hold(
    work: PassWork,
    request: RequestSpec,
    moving: tuple[int | str, ...],
    placement: Placement,
    ready_at: float,
    new: bool,
) -> None:
    """The request waits for the moves, its room reserved from `ready_at`, when the movers have left."""
    start_at = max(work.now, ready_at)
    leaving = set(moving)
    for allocation in work.running:
        if allocation.request.id in leaving:
            work.book.leaves_by(allocation.request.id, allocation.placement.node, start_at)
    reservation = work.book.reserve_at(request, placement, start_at)
    work.waiting.append((request, reservation))
    jobs = ", ".join(str(i) for i in moving)
    cause = (
        f"waits for {len(moving)} running job{'s' if len(moving) > 1 else ''} ({jobs}) to move at "
        f"{'their' if len(moving) > 1 else 'its'} next checkpoint, making room for it on {placement.node}"
    )
    work.plan.waiting.append(Waiting(request.id, cause, len(work.plan.waiting)))
    work.plan.rooms.append(Room(request.id, tuple(moving), placement, ready_at, new))
