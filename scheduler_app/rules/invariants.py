"""DESIGN's capacity rules as queries: what the test suite, the benchmarks and operators check.

Each function returns human-readable violations (empty when the rule holds).
"""

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Set

from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce

from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.rules.billing import billing
from scheduler_app.rules.lifecycle import ACTIVE_STATES, TERMINAL_STATES

_backend_checks: list[Callable[[], list[str]]] = []


def register_backend_check(check: Callable[[], list[str]]) -> None:
    """A backend's comparison of the portal's slices with its cluster's own allocation, run by
    violations(): the backend's app registers it in its AppConfig.ready() (scheduling cannot import
    the backends, which read it)."""
    if check not in _backend_checks:
        _backend_checks.append(check)


def over_committed_gpus() -> list[str]:
    """Cards whose open slices, with what work outside the portal holds (foreign), hold more than 1000
    milli-GPU or more than the card's memory."""
    is_open = Q(allocations__ended_at__isnull=True)
    held = Gpu.objects.annotate(
        milli=Coalesce(Sum("allocations__milli", filter=is_open), 0) + F("foreign_milli"),
        mem=Coalesce(Sum("allocations__gpu_memory_mib", filter=is_open), 0) + F("foreign_memory_mib"),
    ).filter(Q(milli__gt=MILLI_PER_GPU) | Q(mem__gt=F("memory_mib")))
    held = held.select_related("node").order_by("pk")
    return [
        f"{gpu} holds {gpu.milli} milli-GPU and {gpu.mem} of {gpu.memory_mib} MiB"
        + (
            f" ({gpu.foreign_milli} milli-GPU, {gpu.foreign_memory_mib} MiB outside the portal)"
            if gpu.foreign_milli or gpu.foreign_memory_mib
            else ""
        )
        for gpu in held
    ]


def over_committed_at_some_moment(gpu_ids: Iterable[int] | None = None) -> list[str]:
    """Cards whose slices, closed ones too, held more than 1000 milli-GPU or more than the card's memory
    at some moment: rule 1 over the whole history (work recorded after the fact, such as the demo's
    week, never went through the database's guard). Not in violations(): tests that plant ledgers write
    slices by hand. `gpu_ids`: only those cards."""
    slices = Allocation.objects.order_by()
    if gpu_ids is not None:
        slices = slices.filter(gpu_id__in=list(gpu_ids))
    by_gpu: dict[int, list[tuple]] = {}
    for gpu_id, milli, memory, started, ended in slices.values_list(
        "gpu_id", "milli", "gpu_memory_mib", "started_at", "ended_at"
    ):
        by_gpu.setdefault(gpu_id, []).append((started, ended, milli, memory))
    cards = Gpu.objects.select_related("node").in_bulk(list(by_gpu))
    problems = []
    for gpu_id, held in sorted(by_gpu.items()):
        card = cards[gpu_id]
        if peak := first_peak_over(held, MILLI_PER_GPU, card.memory_mib):
            at, milli, memory = peak
            problems.append(f"{card} held {milli} milli-GPU and {memory} of {card.memory_mib} MiB at {at}")
    return problems


def first_peak_over(
    slices: Iterable[tuple[dt.datetime, dt.datetime | None, int, int]], milli_cap: int, memory_cap: int
) -> tuple[dt.datetime, int, int] | None:
    """The first moment at which (start, end or None: open, milli, MiB) slices of one card hold more
    than the caps, as (moment, milli, MiB); None if never. A slice ending when another starts does not
    overlap it."""
    changes = []
    for started, ended, milli, memory in slices:
        changes.append((started, 1, milli, memory))
        if ended is not None:
            changes.append((ended, 0, -milli, -memory))  # 0 sorts ends before starts at the same moment
    milli = memory = 0
    for at, _, d_milli, d_memory in sorted(changes, key=lambda change: change[:2]):
        milli, memory = milli + d_milli, memory + d_memory
        if milli > milli_cap or memory > memory_cap:
            return at, milli, memory
    return None


def slices_of_inactive_requests() -> list[str]:
    """Open slices whose request is not scheduled, running or migrating: capacity leaked."""
    leaked = Allocation.objects.committed().exclude(request__state__in=ACTIVE_STATES)
    return [
        f"{a.request.name} (#{a.request_id}, {a.request.state}) holds {a.milli} milli on gpu #{a.gpu_id}"
        for a in leaked.select_related("request").order_by("pk")
    ]


def active_requests_without_their_slices() -> list[str]:
    """Active requests must hold one open slice per card of their gang."""
    wrong = (
        GpuRequest.objects.filter(state__in=ACTIVE_STATES)
        .annotate(open=Count("allocations", filter=Q(allocations__ended_at__isnull=True)))
        .exclude(open=F("num_gpus"))
        .order_by("pk")
    )
    return [f"{r.name} (#{r.pk}, {r.state}) holds {r.open} of its {r.num_gpus} slice(s)" for r in wrong]


def terminal_requests_without_end() -> list[str]:
    ended = GpuRequest.objects.filter(state__in=TERMINAL_STATES, ended_at__isnull=True).order_by("pk")
    return [f"{r.name} (#{r.pk}) is {r.state} with no ended_at" for r in ended]


def mig_slices_outside_their_layout() -> list[str]:
    """An open slice on a card of a MIG pool holds one instance of the card's layout (an instance
    holds at most one slice: a unique constraint); outside MIG pools, no slice names an instance."""
    wrong = []
    slices = Allocation.objects.committed().select_related("gpu__node__pool").order_by("pk")
    for a in slices.filter(Q(gpu__node__pool__mig_mode="") ^ Q(mig_instance="")):
        wrong.append(
            f"open slice #{a.pk} on {a.gpu} names MIG instance {a.mig_instance!r} in a "
            f"{a.gpu.node.pool.mig_mode or 'non-MIG'} pool"
        )
    for a in slices.exclude(mig_instance=""):
        if a.mig_instance not in {str(i) for i in a.gpu.mig_instances()}:
            wrong.append(
                f"open slice #{a.pk} holds {a.mig_instance}, not in {a.gpu}'s layout {a.gpu.mig_layout!r}"
            )
    return wrong


def violations() -> list[str]:
    """Every broken rule, across the whole database."""
    return [
        *over_committed_gpus(),
        *slices_of_inactive_requests(),
        *active_requests_without_their_slices(),
        *terminal_requests_without_end(),
        *mig_slices_outside_their_layout(),
        *(problem for check in _backend_checks for problem in check()),
    ]


def requests_on_two_nodes() -> list[str]:
    """A request's open slices all lie on one node (a gang runs on one node): slices on two run it twice."""
    spread = (
        GpuRequest.objects.annotate(
            nodes=Count("allocations__gpu__node", filter=Q(allocations__ended_at__isnull=True), distinct=True)
        )
        .filter(nodes__gt=1)
        .order_by("pk")
    )
    return [f"{r.name} (#{r.pk}) holds open slices on {r.nodes} nodes" for r in spread]


def double_runs(running: Mapping[int, Set[str]]) -> list[str]:
    """`running`: request id -> the process groups running it (as the agents, or the host's process
    table, report them). A request runs at most once, and only while it holds a slice."""
    held = set(Allocation.objects.committed().values_list("request_id", flat=True))
    problems = [
        f"request #{pk} runs {len(groups)} times: {sorted(groups)}"
        for pk, groups in sorted(running.items())
        if len(groups) > 1
    ]
    problems += [
        f"request #{pk} runs ({sorted(groups)}) without holding a slice"
        for pk, groups in sorted(running.items())
        if groups and pk not in held
    ]
    return problems


def lost_requests(accepted: Iterable[int]) -> list[str]:
    """Every request the portal accepted (answered 201) is still there, in one state (one row, one column)."""
    wanted = set(accepted)
    missing = wanted - set(GpuRequest.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    return [f"accepted request #{pk} is gone" for pk in sorted(missing)]


def unresumed_moves() -> list[str]:
    """Every migrated job resumed from its last checkpoint: after each requeue that recorded a checkpoint
    (scheduler_app.services.migration.requeue_from_checkpoint), the request's next run started from
    that checkpoint or a later one (what its agent found when it started it, on the run's event)."""
    moved_at: dict[int, dt.datetime] = {}  # request -> the checkpoint its last move recorded
    problems = []
    for event in Event.objects.filter(
        content_type__app_label="scheduler_app",
        content_type__model="gpurequest",
        to_state__in=[RequestState.PENDING, RequestState.RUNNING],
    ).only("object_id", "to_state", "data", "created_at"):
        data = event.data or {}
        if event.to_state == RequestState.PENDING:
            if data.get("checkpoint_at"):
                moved_at[event.object_id] = dt.datetime.fromisoformat(data["checkpoint_at"])
            continue
        checkpoint = moved_at.pop(event.object_id, None)
        if checkpoint is None:
            continue
        resumed = data.get("resumed_from")
        if resumed is None:
            problems.append(
                f"request #{event.object_id} restarted from the beginning at {event.created_at}, "
                f"not from its checkpoint of {checkpoint}"
            )
        elif dt.datetime.fromisoformat(resumed) < checkpoint:
            problems.append(
                f"request #{event.object_id} resumed from {resumed}, before its checkpoint of {checkpoint}"
            )
    return problems


def after_fault(
    *,
    accepted: Iterable[int] = (),
    running: Mapping[int, Set[str]] | None = None,
    now: dt.datetime | None = None,
) -> list[str]:
    """What must hold once a fault has been dealt with: no accepted request lost, every capacity rule, no
    request on two nodes or run twice (`running`, see double_runs), billing's own rules as of `now`
    (the ledger equal to the slices: billing_app.invariants), every moved job resumed from its last
    checkpoint."""
    return [
        *lost_requests(accepted),
        *violations(),
        *requests_on_two_nodes(),
        *double_runs(running or {}),
        *billing().violations(now),
        *unresumed_moves(),
    ]
