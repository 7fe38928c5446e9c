"""The placement core's compiled functions (numba), and compiling them ahead of the first pass.

numba compiles a function at its first call, for the argument types of that call, and keeps the
machine code in numba's cache (``__pycache__`` beside the source, or ``NUMBA_CACHE_DIR``), where
every later process loads it in well under a second. Compiling them all takes seconds, so the
README's commands and the production steps run ``python -m scheduler_app.core.placement.compiled``
first: the first scheduling pass does not pay for it.
"""

from __future__ import annotations

from ..cluster import GpuState, NodeState, RequestSpec
from ..fragmentation import (
    WorkloadMix,
    card_increases,
    current_fragmentation,
    fragmentation_of_states,
)
from .fgd import candidates, first_of_unknown_states, keep_best_cards, share_state_scores
from .fgd_plus import idle_cards
from .gang_room import gang_cost, refresh_hosts
from .index import recheck_feasible
from .placer import Placer
from .policy import least

COMPILED = (
    fragmentation_of_states,
    current_fragmentation,
    card_increases,
    keep_best_cards,
    candidates,
    first_of_unknown_states,
    share_state_scores,
    least,
    idle_cards,
    recheck_feasible,
    refresh_hosts,
    gang_cost,
)


def compile_all() -> None:
    """Call every compiled function with the argument types the policies pass (a few placements of
    each kind on a small cluster of two GPU models), so each is compiled or loaded from the cache."""
    requests = [
        RequestSpec("one card", 500, 1, cpu_milli=2_000, memory_mib=4_096),
        RequestSpec("inference", 250, 1, cpu_milli=1_000, task_type="inference"),
        RequestSpec("gang", 1000, 2, cpu_milli=8_000, memory_mib=16_384, models=frozenset({"A100"})),
        RequestSpec("cpu only", 0, 0, cpu_milli=4_000, memory_mib=8_192),
        RequestSpec("pinned", 500, 1, gpu_memory_mib=8_192, pools=frozenset({"a"})),
    ]
    for policy in ("fgd-plus", "fgd"):
        nodes = [
            NodeState(
                f"n{i}",
                "a" if i % 2 else "b",
                32_000,
                131_072,
                [GpuState(c, model, 81_920) for c in range(4)],
            )
            for i, model in enumerate(("A100", "A100", "T4"))
        ]
        placer = Placer(nodes, policy, WorkloadMix.from_requests(requests))
        for request in requests:
            placer.place(request)


if __name__ == "__main__":
    compile_all()
