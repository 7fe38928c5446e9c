"""DESIGN's capacity rules as queries: what the test suite, the benchmarks and operators check.

Each function returns human-readable violations (empty when the rule holds).
"""

from django.db.models import Count, F, Q, Sum

from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.lifecycle import ACTIVE_STATES, TERMINAL_STATES
from scheduler_app.models import Allocation, Gpu, GpuRequest


def over_committed_gpus() -> list[str]:
    """Cards whose open slices hold more than 1000 milli-GPU or more than the card's memory."""
    held = Gpu.objects.annotate(
        milli=Sum("allocations__milli", filter=Q(allocations__ended_at__isnull=True)),
        mem=Sum("allocations__gpu_memory_mib", filter=Q(allocations__ended_at__isnull=True)),
    ).filter(Q(milli__gt=MILLI_PER_GPU) | Q(mem__gt=F("memory_mib")))
    held = held.select_related("node").order_by("pk")
    return [f"{gpu} holds {gpu.milli} milli-GPU and {gpu.mem} of {gpu.memory_mib} MiB" for gpu in held]


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
    ]
