"""The words a waiting user reads about why their request does not start."""

from __future__ import annotations

from collections.abc import Sequence

from .cluster import MILLI_PER_GPU, NodeState, RequestSpec


def where(request: RequestSpec) -> str:
    """'in pool a' / 'in pools a, b' / 'in any pool'."""
    if not request.pools:
        return "in any pool"
    label = "pool" if len(request.pools) == 1 else "pools"
    return f"in {label} {', '.join(sorted(request.pools))}"


def slice_text(request: RequestSpec) -> str:
    """'500 milli-GPU' or '500 milli-GPU and 40960 MiB' for one card's slice."""
    memory = f" and {request.gpu_memory_mib} MiB" if request.gpu_memory_mib else ""
    return f"{request.gpu_milli} milli-GPU{memory}"


def no_room(request: RequestSpec) -> str:
    """Why a request that fits the cluster does not fit it right now."""
    if request.num_gpus == 0:
        host = f"{request.cpu_milli} milli-CPU and {request.memory_mib} MiB"
        return f"no node with {host} free {where(request)}"
    if request.num_gpus > 1:
        return f"no node with {request.num_gpus} GPUs of {slice_text(request)} free at once {where(request)}"
    return f"no GPU with {slice_text(request)} free {where(request)}"


def never_fits(request: RequestSpec, nodes: Sequence[NodeState]) -> str:
    """Why no node could hold the request even when idle ('' when some node could)."""
    for node in nodes:
        if request.pools and node.pool not in request.pools:
            continue
        if node.cpu_milli < request.cpu_milli or node.memory_mib < request.memory_mib:
            continue
        cards = [
            g
            for g in node.gpus
            if (not request.models or g.model in request.models) and g.memory_mib >= request.memory_on(g)
        ]
        if request.gpu_milli <= MILLI_PER_GPU and len(cards) >= request.num_gpus:
            return ""
    return f"no node {where(request)} can ever hold {request.num_gpus} GPU(s) of {slice_text(request)}"
