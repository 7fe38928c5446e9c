"""The Placer: a policy bound to one cluster state for a pass, and the one-off ``choose_placement``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..cluster import MILLI_PER_GPU, NodeState, Placement, RequestSpec
from ..fragmentation import WorkloadMix
from ..mig import mig_placement, release_instances, take_instances
from .best_fit import BestFit
from .fgd import Fgd
from .fgd_plus import FgdPlus
from .first_fit import FirstFit
from .index import ClusterIndex
from .policy import Policy

DEFAULT_POLICY = "fgd-plus"

POLICIES: dict[str, type[Policy]] = {
    "first-fit": FirstFit,
    "best-fit": BestFit,
    "fgd": Fgd,
    "fgd-plus": FgdPlus,
}


class Placer:
    """A policy bound to one cluster state for a scheduling pass; it mutates the given NodeStates."""

    def __init__(
        self, nodes: Sequence[NodeState], policy: str = DEFAULT_POLICY, workload: WorkloadMix | None = None
    ) -> None:
        try:
            factory = POLICIES[policy]
        except KeyError:
            raise ValueError(f"unknown placement policy {policy!r}; choose from {sorted(POLICIES)}") from None
        self.index = ClusterIndex(nodes)
        self.policy = factory(self.index, workload)

    def choose(self, request: RequestSpec, views: Mapping[str, NodeState] | None = None) -> Placement | None:
        """Where the request would go now; None when it fits nowhere. Changes nothing.

        views: nodes to judge as these states instead (by name; a reservation's guarded view), as
        if the Placer had been built on them; the index is back on the nodes afterwards.
        """
        index = self.index
        seen = [(j, view) for name, view in (views or {}).items() if (j := index.row.get(name)) is not None]
        seen = [(j, view) for j, view in seen if index.differs(j, view)]
        for j, view in seen:
            index.sync(j, view)
        try:
            choice = self.policy.choose(request)
        finally:
            for j, _ in seen:
                index.sync(j)
        if choice is None:
            return None
        j, cards = choice
        node = self.index.nodes[j]
        if request.num_gpus == 0:
            return Placement(request.id, node.name, (), 0, 0)
        if node.gpus[cards[0]].mig is not None:
            return mig_placement(request, node, cards)
        return Placement(
            request.id, node.name, cards, request.gpu_milli, request.memory_on(node.gpus[cards[0]])
        )

    def fits(self, request: RequestSpec) -> bool:
        """Whether the request fits on some node now (as `choose` would find, ignoring the policy)."""
        return bool(self.index.feasible(request)[0].any())

    def place(self, request: RequestSpec) -> Placement | None:
        """Choose and take the resources; None (and no change) when it fits nowhere."""
        placement = self.choose(request)
        if placement is not None:
            self.apply(request, placement)
        return placement

    def apply(self, request: RequestSpec, placement: Placement) -> None:
        j = self.index.row[placement.node]
        apply_placement(self.index.nodes[j], request, placement)
        self.index.sync(j)

    def refresh(self, node: str, state: NodeState | None = None) -> None:
        """Read a node's free resources again after the caller changed its NodeState, or replaced it
        with `state` (a copy the caller changes from now on); a no-op for a node this Placer does not
        hold."""
        j = self.index.row.get(node)
        if j is not None:
            if state is not None:
                self.index.nodes[j] = state
            self.index.sync(j)

    def release(self, request: RequestSpec, placement: Placement) -> None:
        j = self.index.row[placement.node]
        release_placement(self.index.nodes[j], request, placement)
        self.index.sync(j)


def choose_placement(
    nodes: Sequence[NodeState],
    request: RequestSpec,
    policy: str = "first-fit",
    workload: WorkloadMix | None = None,
) -> Placement | None:
    """Run the named policy once; None when the request fits nowhere right now.

    `workload` is the mix of typical request shapes the fgd policies protect
    (``WorkloadMix.from_requests(recent_requests)``); without it they fall back
    to their tie-breaks. For many decisions over the same nodes use ``Placer``.
    """
    return Placer(nodes, policy, workload).choose(request)


def apply_placement(node: NodeState, request: RequestSpec, placement: Placement) -> None:
    """Take the placement's resources from the node (the caller checked it fits)."""
    node.free_cpu_milli -= request.cpu_milli
    node.free_memory_mib -= request.memory_mib
    if placement.mig:
        take_instances(node, placement)
        return
    for index in placement.gpus:
        gpu = node.gpus[index]
        gpu.free_milli -= placement.milli
        gpu.free_memory_mib -= placement.gpu_memory_mib
        assert 0 <= gpu.free_milli <= MILLI_PER_GPU, "over-commit in the pure core"


def release_placement(node: NodeState, request: RequestSpec, placement: Placement) -> None:
    """Give the placement's resources back to the node."""
    node.free_cpu_milli += request.cpu_milli
    node.free_memory_mib += request.memory_mib
    if placement.mig:
        release_instances(node, placement)
        return
    for index in placement.gpus:
        gpu = node.gpus[index]
        gpu.free_milli += placement.milli
        gpu.free_memory_mib += placement.gpu_memory_mib
