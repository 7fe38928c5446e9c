"""Plain data the scheduling core works on: no ORM, no clock, no I/O.

Units: GPU share in milli-GPU (1..1000 per card), memory in MiB, CPU in
milli-cores, times in seconds since an arbitrary epoch chosen by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler_app.constants import MILLI_PER_GPU  # plain Python, no Django: the core may import it

if TYPE_CHECKING:
    from .mig import Instance, MigCard


@dataclass(slots=True)
class GpuState:
    """One card on a node: what it is and what is still free on it."""

    index: int
    model: str
    memory_mib: int
    free_milli: int = MILLI_PER_GPU
    free_memory_mib: int = -1
    # In MIG mode: its layout and instances in use; free_milli/free_memory_mib are then the most a
    # request could still get (core/mig.py).
    mig: MigCard | None = None

    def __post_init__(self) -> None:
        if self.free_memory_mib < 0:
            self.free_memory_mib = self.memory_mib
        if self.mig is not None:
            self.free_milli, self.free_memory_mib = self.mig.best_free()


@dataclass(slots=True)
class NodeState:
    """A GPU node with its free host resources and its cards (gpus[i].index == i)."""

    name: str
    pool: str
    cpu_milli: int
    memory_mib: int
    gpus: list[GpuState] = field(default_factory=list)
    capacity_type: str = "on-demand"
    free_cpu_milli: int = -1
    free_memory_mib: int = -1

    def __post_init__(self) -> None:
        if self.free_cpu_milli < 0:
            self.free_cpu_milli = self.cpu_milli
        if self.free_memory_mib < 0:
            self.free_memory_mib = self.memory_mib


@dataclass(frozen=True, slots=True)
class OfflineNode:
    """A node that takes no new work now, as it is when idle: what a request waits for when only such
    nodes could hold it. status: why (the portal's lost, suspect, draining, reclaimed); since: when it
    got that status, as the caller words times ('' when not known)."""

    node: NodeState
    status: str
    since: str = ""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What a request asks for.

    gpu_milli is per card; a request with num_gpus > 1 takes whole cards
    (gpu_milli == 1000). num_gpus == 0 is a CPU-only request (the trace has
    them). gpu_memory_mib is per card; 0 means "in proportion to the share".
    An empty models/pools set means "any".
    """

    id: int | str
    gpu_milli: int
    num_gpus: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_memory_mib: int = 0
    models: frozenset[str] = frozenset()
    pools: frozenset[str] = frozenset()
    task_type: str = "training"
    priority: int = 0
    team: str = ""
    max_duration_s: int | None = None
    billing_mode: str = "on-demand"
    allow_fallback: bool = False
    submitted_at: float = 0.0

    def total_milli(self) -> int:
        return self.gpu_milli * self.num_gpus

    def memory_on(self, gpu: GpuState) -> int:
        """GPU memory (MiB) this request needs on one card of that kind."""
        if self.gpu_memory_mib:
            return self.gpu_memory_mib
        return gpu.memory_mib * self.gpu_milli // MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request goes: a node and the indices of its cards, each getting `milli`.

    On MIG cards, `mig` holds per card the instance taken and, when the scheduler re-partitions or
    extends the card's layout for it, the new layout (else None)."""

    request_id: int | str
    node: str
    gpus: tuple[int, ...]
    milli: int
    gpu_memory_mib: int
    mig: tuple[tuple[Instance, tuple[Instance, ...] | None], ...] = ()
