"""The words a waiting user reads about why their request does not start."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .cluster import MILLI_PER_GPU, NodeState, OfflineNode, RequestSpec

# How a reason says a node that takes no new work is out ("are offline"), and what it is ("lost"), by
# its status; another status is "out of service".
OUT_OF_SERVICE = {
    "lost": ("offline", "lost"),
    "suspect": ("offline", "missing heartbeats"),
    "draining": ("draining", "draining"),
    "reclaimed": ("reclaimed", "reclaimed"),
}


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


def never_fits(request: RequestSpec, nodes: Sequence[NodeState], offline: Sequence[OfflineNode] = ()) -> str:
    """Why no node that takes work could hold the request even when idle ('' when some node could): the
    offline nodes that could, or else that no node of any state could."""
    if any(could_hold(request, node) for node in nodes):
        return ""
    if holders := [o for o in offline if could_hold(request, o.node)]:
        return offline_text(holders, Counter(n.pool for n in nodes) + Counter(o.node.pool for o in offline))
    return f"no node {where(request)} can ever hold {request.num_gpus} GPU(s) of {slice_text(request)}"


def could_hold(request: RequestSpec, node: NodeState) -> bool:
    """Whether the node, idle, could hold the request: its pool, host resources and cards."""
    if request.pools and node.pool not in request.pools:
        return False
    if node.cpu_milli < request.cpu_milli or node.memory_mib < request.memory_mib:
        return False
    cards = [
        g
        for g in node.gpus
        if (not request.models or g.model in request.models) and g.memory_mib >= request.memory_on(g)
    ]
    return request.gpu_milli <= MILLI_PER_GPU and len(cards) >= request.num_gpus


def offline_text(holders: Sequence[OfflineNode], pool_sizes: Counter) -> str:
    """'the 3 nodes of pool a100 are offline (lost since 23:11 UTC)', a clause per pool of `holders` (the
    offline nodes that could hold the request); `pool_sizes`: each pool's nodes of every status."""
    pools = sorted({h.node.pool for h in holders})
    return " and ".join(_pool_clause([h for h in holders if h.node.pool == p], pool_sizes[p]) for p in pools)


def _pool_clause(here: list[OfflineNode], pool_size: int) -> str:
    """One pool's offline nodes that could hold the request, out of the pool's `pool_size` nodes."""
    pool = here[0].node.pool
    if len(here) == 1:
        subject = f"node {here[0].node.name} of pool {pool} is"
    else:
        which = "" if len(here) == pool_size else " that could hold it"
        subject = f"the {len(here)} nodes of pool {pool}{which} are"
    groups = sorted(Counter((h.status, h.since) for h in here).items())
    words = [OUT_OF_SERVICE.get(status, ("out of service", status)) for (status, _), _ in groups]
    verbs = {verb for verb, _ in words}
    verb = verbs.pop() if len(verbs) == 1 else "out of service"
    details = []
    for ((_, since), count), (_, word) in zip(groups, words, strict=True):
        what = f"{count} {word}" if len(groups) > 1 else "" if word == verb else word
        details.append(" ".join(part for part in (what, f"since {since}" if since else "") if part))
    detail = ", ".join(d for d in details if d)
    return f"{subject} {verb}" + (f" ({detail})" if detail else "")
