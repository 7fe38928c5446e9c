"""Where a request goes: placement policies over plain cluster state.

A policy scores feasible (node, cards) candidates; the lowest score wins and
ties go to the earliest node, so every decision is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from .cluster import MILLI_PER_GPU, GpuState, NodeState, Placement, RequestSpec


def gpu_fits(request: RequestSpec, gpu: GpuState) -> bool:
    """Whether one card has the share and memory this request needs per card."""
    return gpu.free_milli >= request.gpu_milli and gpu.free_memory_mib >= request.memory_on(gpu)


def node_admits(request: RequestSpec, node: NodeState) -> bool:
    """Host resources, pool and GPU-model constraints, before looking at cards."""
    if request.pools and node.pool not in request.pools:
        return False
    if node.free_cpu_milli < request.cpu_milli or node.free_memory_mib < request.memory_mib:
        return False
    if request.models and request.num_gpus and not any(g.model in request.models for g in node.gpus):
        return False
    return True


def candidate_gpus(request: RequestSpec, node: NodeState) -> list[GpuState]:
    """Cards on this node that could hold one slice of the request."""
    return [
        g
        for g in node.gpus
        if (not request.models or g.model in request.models) and gpu_fits(request, g)
    ]


def first_fit(nodes: Sequence[NodeState], request: RequestSpec) -> Placement | None:
    """The first node (in the given order) with enough cards, lowest indices first."""
    for node in nodes:
        if not node_admits(request, node):
            continue
        if request.num_gpus == 0:
            return Placement(request.id, node.name, (), 0, 0)
        gpus = candidate_gpus(request, node)
        if len(gpus) >= request.num_gpus:
            chosen = gpus[: request.num_gpus]
            return Placement(
                request.id,
                node.name,
                tuple(g.index for g in chosen),
                request.gpu_milli,
                request.memory_on(chosen[0]),
            )
    return None


POLICIES = {"first-fit": first_fit}


def choose_placement(
    nodes: Sequence[NodeState], request: RequestSpec, policy: str = "first-fit"
) -> Placement | None:
    """Run the named policy; None when the request fits nowhere right now."""
    try:
        return POLICIES[policy](nodes, request)
    except KeyError:
        raise ValueError(f"unknown placement policy {policy!r}; choose from {sorted(POLICIES)}") from None


def apply_placement(node: NodeState, request: RequestSpec, placement: Placement) -> None:
    """Take the placement's resources from the node (the caller checked it fits)."""
    node.free_cpu_milli -= request.cpu_milli
    node.free_memory_mib -= request.memory_mib
    for index in placement.gpus:
        gpu = node.gpus[index]
        gpu.free_milli -= placement.milli
        gpu.free_memory_mib -= placement.gpu_memory_mib
        assert 0 <= gpu.free_milli <= MILLI_PER_GPU, "over-commit in the pure core"


def release_placement(node: NodeState, request: RequestSpec, placement: Placement) -> None:
    """Give the placement's resources back to the node."""
    node.free_cpu_milli += request.cpu_milli
    node.free_memory_mib += request.memory_mib
    for index in placement.gpus:
        gpu = node.gpus[index]
        gpu.free_milli += placement.milli
        gpu.free_memory_mib += placement.gpu_memory_mib
