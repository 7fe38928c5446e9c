"""MIG (Multi-Instance GPU) geometry and the choice of an instance for a request. Pure: no ORM.

A card in MIG mode is cut into GPU instances. Each profile takes some of the card's 7 compute
slices and 8 memory slices, and may start only at some memory-slice offsets. From NVIDIA's
MIG user guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html), A100 table:
"For A100-SXM4-80GB, the profile names will change according to the memory proportion - for
example, 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"; its placements
(``nvidia-smi mig -lgipp``, {start offsets}:size in memory slices) are 1g {0,1,2,3,4,5,6}:1,
1g with 2/8 memory {0,2,4,6}:2, 2g {0,2,4}:2, 3g {0,4}:4, 4g {0}:4, 7g {0}:8. H100-80GB has
the same names and placements as A100-80GB.

A layout is a list of instances ``profile@start`` (text form ``"3g.40gb@0,2g.20gb@4,1g.10gb@6"``).
An allocation on a MIG card holds one whole instance: it is never shared by two requests, and it
counts as the instance's compute share (compute slices / 7, in milli-GPU, rounded down) and its
memory (memory slices / 8 of the card), so the card's sums stay within 1000 milli and its memory.

Modes, per pool: ``fixed`` (the operator sets each card's layout; the scheduler only picks free
instances) and ``dynamic`` (the scheduler also adds instances in free slices and re-partitions a
card, replacing its whole layout, only when no instance on it is in use).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cluster import MILLI_PER_GPU, GpuState, NodeState, Placement, RequestSpec

COMPUTE_SLICES = 7
MEMORY_SLICES = 8
FIXED = "fixed"
DYNAMIC = "dynamic"


@dataclass(frozen=True, slots=True)
class Profile:
    """A GPU instance profile: compute and memory slices, and the memory-slice offsets it may start at."""

    name: str
    compute: int
    memory: int
    starts: tuple[int, ...]

    @property
    def milli(self) -> int:
        """The compute share it gives, in milli-GPU (rounded down: 7 x 1g stays within 1000)."""
        return self.compute * MILLI_PER_GPU // COMPUTE_SLICES

    def memory_mib(self, card_memory_mib: int) -> int:
        return card_memory_mib * self.memory // MEMORY_SLICES


def _geometry(gb_per_slice: int) -> tuple[Profile, ...]:
    g = gb_per_slice
    return (
        Profile(f"1g.{g}gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        Profile(f"1g.{2 * g}gb", 1, 2, (0, 2, 4, 6)),
        Profile(f"2g.{2 * g}gb", 2, 2, (0, 2, 4)),
        Profile(f"3g.{4 * g}gb", 3, 4, (0, 4)),
        Profile(f"4g.{4 * g}gb", 4, 4, (0,)),
        Profile(f"7g.{8 * g}gb", 7, 8, (0,)),
    )


# Profiles of a MIG-capable card, by its memory class (GB): A100-40GB, and A100/H100-80GB.
GEOMETRIES: dict[int, tuple[Profile, ...]] = {40: _geometry(5), 80: _geometry(10)}


def geometry_for(memory_mib: int) -> tuple[Profile, ...] | None:
    """The profiles of a card of that memory (40 or 80 GB class); None when MIG has none for it."""
    gb = round(memory_mib / 1024)
    for size in GEOMETRIES:
        if abs(gb - size) <= size // 10:
            return GEOMETRIES[size]
    return None


@dataclass(frozen=True, slots=True)
class Instance:
    profile: Profile
    start: int

    @property
    def slots(self) -> range:
        return range(self.start, self.start + self.profile.memory)

    def __str__(self) -> str:
        return f"{self.profile.name}@{self.start}"


class LayoutError(ValueError):
    """A layout that the card's geometry does not allow; the message says why."""


def parse_layout(text: str, memory_mib: int) -> list[Instance]:
    """``"3g.40gb@0,2g.20gb@4"`` as instances, checked against the card's geometry."""
    profiles = geometry_for(memory_mib)
    if profiles is None:
        raise LayoutError(f"a {memory_mib} MiB card has no MIG geometry (40 GB or 80 GB cards only)")
    by_name = {p.name: p for p in profiles}
    instances = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, start = item.partition("@")
        profile = by_name.get(name)
        if profile is None:
            raise LayoutError(f"unknown profile {name!r} for this card; choose from {', '.join(by_name)}")
        if not start.isdigit() or int(start) not in profile.starts:
            offsets = ", ".join(str(s) for s in profile.starts)
            raise LayoutError(f"{name} may start only at memory slice {offsets}, not {start!r}")
        instances.append(Instance(profile, int(start)))
    check_layout(instances)
    return sorted(instances, key=lambda i: i.start)


def card_instances(layout: str, memory_mib: int) -> list[Instance]:
    """A card's MIG layout as instances: none where it has no layout (a card outside MIG pools, whose
    memory may have no MIG geometry); LayoutError when invalid."""
    return parse_layout(layout, memory_mib) if layout else []


def check_layout(instances: list[Instance]) -> None:
    """Refuse overlapping instances. (Within the placements, instances that do not overlap never take
    more than the 7 compute slices: the most are 4g@0 + 3g@4, or 1g at 0..6.)"""
    taken: dict[int, Instance] = {}
    for instance in instances:
        for slot in instance.slots:
            if slot in taken:
                raise LayoutError(f"{instance} overlaps {taken[slot]}")
            taken[slot] = instance


def format_layout(instances: list[Instance]) -> str:
    return ",".join(str(i) for i in sorted(instances, key=lambda i: i.start))


def smallest_profile(profiles: tuple[Profile, ...], milli: int, memory_mib: int, card_memory_mib: int):
    """The smallest profile (compute, then memory) whose share and memory cover the request, or None."""
    covering = [p for p in profiles if p.milli >= milli and p.memory_mib(card_memory_mib) >= memory_mib]
    return min(covering, key=lambda p: (p.compute, p.memory), default=None)


@dataclass(slots=True)
class MigCard:
    """A card's MIG state: its mode, current layout and the starts of the instances in use."""

    mode: str
    memory_mib: int
    layout: list[Instance] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    @property
    def profiles(self) -> tuple[Profile, ...]:
        return geometry_for(self.memory_mib) or ()

    def copy(self) -> MigCard:
        return MigCard(self.mode, self.memory_mib, list(self.layout), set(self.used))

    def free_instances(self) -> list[Instance]:
        return [i for i in self.layout if i.start not in self.used]

    def choose(self, milli: int, memory_mib: int) -> tuple[Instance, list[Instance] | None] | None:
        """(instance, new layout or None) for a request, or None when the card cannot hold it.

        Fixed: the smallest free instance that covers it, lowest start first. Dynamic: a free
        instance of the smallest covering profile; else that profile added in free slices at its
        lowest valid start; else, when no instance is in use, the card re-partitioned for it
        (``repartition``); else, like fixed, a larger free instance (a busy card keeps its layout).
        """
        fits = [
            i
            for i in self.free_instances()
            if i.profile.milli >= milli and i.profile.memory_mib(self.memory_mib) >= memory_mib
        ]
        smallest = min(fits, key=lambda i: (i.profile.compute, i.profile.memory, i.start), default=None)
        if self.mode != DYNAMIC:
            return None if smallest is None else (smallest, None)
        profile = smallest_profile(self.profiles, milli, memory_mib, self.memory_mib)
        if profile is None:
            return None
        if smallest is not None and smallest.profile == profile:
            return smallest, None
        added = first_free(profile, self.layout)
        if added is not None:
            return added, sorted([*self.layout, added], key=lambda i: i.start)
        if not self.used:
            layout = repartition(profile)
            return layout[0], layout
        return None if smallest is None else (smallest, None)

    def best_free(self) -> tuple[int, int]:
        """(milli, memory MiB) of the most a request could still get here: the largest free instance,
        or on a dynamic card the largest profile that still fits (any, when idle). A free 1g slice
        counts as 1g even where a larger instance would fit the slot count but not the geometry."""
        candidates = [i.profile for i in self.free_instances()]
        if self.mode == DYNAMIC:
            if not self.used:
                candidates = list(self.profiles)
            else:
                candidates += [p for p in self.profiles if first_free(p, self.layout) is not None]
        best_milli = max((p.milli for p in candidates), default=0)
        best_memory = max((p.memory_mib(self.memory_mib) for p in candidates), default=0)
        return best_milli, best_memory

    def take(self, instance: Instance, layout: list[Instance] | None) -> None:
        if layout is not None:
            self.layout = list(layout)
        assert instance.start not in self.used, "MIG instance shared in the pure core"
        self.used.add(instance.start)

    def give_back(self, instance: Instance) -> None:
        self.used.discard(instance.start)


def first_free(profile: Profile, layout: list[Instance]) -> Instance | None:
    """`profile` at its lowest start whose slots no instance of `layout` takes."""
    held = {slot for i in layout for slot in i.slots}
    for start in profile.starts:
        candidate = Instance(profile, start)
        if not held.intersection(candidate.slots):
            return candidate
    return None


def repartition(profile: Profile) -> list[Instance]:
    """The layout the scheduler gives an idle card for a request of `profile`: as many of that
    profile as fit, then the rest filled with the smallest profile, so the next alike requests
    find instances ready. The request takes the first one."""
    layout: list[Instance] = []
    for fill in (profile, _smallest(profile)):
        while (added := first_free(fill, layout)) is not None:
            layout.append(added)
    return sorted(layout, key=lambda i: i.start)


def _smallest(profile: Profile) -> Profile:
    geometry = next(g for g in GEOMETRIES.values() if profile in g)
    return geometry[0]


def mig_placement(request: RequestSpec, node: NodeState, cards: tuple[int, ...]) -> Placement | None:
    """The placement on these MIG cards of `node`: per card the instance `MigCard.choose` gives,
    the allocation counting as that instance's share and memory; None when a card has none. (The
    policy chose cards whose best free share and memory cover the request; in this geometry one
    instance has both, so that does not happen.)"""
    chosen = []
    for index in cards:
        gpu = node.gpus[index]
        choice = gpu.mig.choose(request.gpu_milli, request.memory_on(gpu)) if gpu.mig else None
        if choice is None:
            return None
        instance, layout = choice
        chosen.append((instance, None if layout is None else tuple(layout)))
    profile = chosen[0][0].profile
    memory = profile.memory_mib(node.gpus[cards[0]].memory_mib)
    return Placement(request.id, node.name, cards, profile.milli, memory, tuple(chosen))


def take_instances(node: NodeState, placement: Placement) -> None:
    for index, (instance, layout) in zip(placement.gpus, placement.mig, strict=True):
        gpu = node.gpus[index]
        gpu.mig.take(instance, None if layout is None else list(layout))
        gpu.free_milli, gpu.free_memory_mib = gpu.mig.best_free()


def release_instances(node: NodeState, placement: Placement) -> None:
    for index, (instance, _) in zip(placement.gpus, placement.mig, strict=True):
        gpu = node.gpus[index]
        gpu.mig.give_back(instance)
        gpu.free_milli, gpu.free_memory_mib = gpu.mig.best_free()


def hold(gpu: GpuState, instance_text: str) -> Instance:
    """Mark a running slice's instance (``profile@start``) as in use; one the card's layout lacks
    (the services never let that happen) joins it, since the slice holds it for real."""
    assert gpu.mig is not None
    (instance,) = parse_layout(instance_text, gpu.memory_mib)
    layout = None if instance in gpu.mig.layout else [*gpu.mig.layout, instance]
    gpu.mig.take(instance, layout)
    gpu.free_milli, gpu.free_memory_mib = gpu.mig.best_free()
    return instance


def mig_slice(instance: Instance, layout: tuple[Instance, ...] | None) -> tuple[str, str | None]:
    """(instance, new layout or None) as the text an allocation and a card record."""
    return str(instance), None if layout is None else format_layout(list(layout))
