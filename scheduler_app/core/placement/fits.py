"""Whether a request fits one plain node or card (no index): the checks every policy makes."""

from __future__ import annotations

from ..cluster import GpuState, NodeState, RequestSpec


def gpu_fits(request: RequestSpec, gpu: GpuState) -> bool:
    """Whether one card has the share and memory this request needs per card."""
    return gpu.free_milli >= request.gpu_milli and gpu.free_memory_mib >= request.memory_on(gpu)


def node_admits(request: RequestSpec, node: NodeState) -> bool:
    """Host resources, pool and GPU-model constraints, before looking at cards."""
    if request.pools and node.pool not in request.pools:
        return False
    if node.free_cpu_milli < request.cpu_milli or node.free_memory_mib < request.memory_mib:
        return False
    return not request.models or not request.num_gpus or any(g.model in request.models for g in node.gpus)


def candidate_gpus(request: RequestSpec, node: NodeState) -> list[GpuState]:
    """Cards on this node that could hold one slice of the request."""
    return [
        g for g in node.gpus if (not request.models or g.model in request.models) and gpu_fits(request, g)
    ]
