"""Slurm's gres strings, read and written: a node's cards and shards (or MIG instances), a job's
request and the card indexes Slurm gave it. Pure functions.

MIG instances are typed gpus whose type ends in a profile (`a100_1g.10gb`, `3g.40gb`). Slurm's gres
says neither which card hosts an instance nor where on it, so the portal groups a node's instances
into cards itself: in the order the node's gres lists them, each goes to the first card (then the
lowest start) where the card's MIG geometry (scheduler_app.core.mig) has room for it, else to a new
card. Slurm's gres index (the IDX of a job's `gres_detail`) counts the node's gpus type by type in
that same order (seen on 22.05 even where gres.conf interleaves the types), so index i is the i-th
instance packed.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.mig import Instance, LayoutError, first_free, geometry_for

# "gpu:fake:4", "shard:fake:32", "gpu:a100:2(S:0-1)", "gpu:4"
_ENTRY = re.compile(r"(?P<name>[a-z]+)(?::(?P<type>[^:(,]+))?:(?P<count>\d+)")
_INDEX = re.compile(r"IDX:(?P<ranges>[\d,\-]+)")
_SHARDS = re.compile(r"^shard(?::[^:(]+)?:(?P<count>\d+)")
_MIG_PROFILE = re.compile(r"(?:^|_)(?P<profile>\d+g\.\d+gb)$")


@dataclass(frozen=True)
class NodeGres:
    """A node's cards (`cards` of `card_type`, "" untyped) and the shards of each card; `gpu_types`:
    the type of each gpu, by Slurm's gres index."""

    cards: int
    card_type: str
    shards_per_card: int
    gpu_types: tuple[str, ...] = ()

    @property
    def mig(self) -> bool:
        """Its gpus are MIG instances (all of them: see `mixed`)."""
        return any(mig_profile(t) for t in self.gpu_types)

    def mixed(self) -> str:
        """Why the node cannot be imported as MIG ("" when it can or is not MIG): instances beside whole
        cards or shards."""
        if not self.mig:
            return ""
        if whole := sorted({t or "untyped" for t in self.gpu_types if not mig_profile(t)}):
            return f"MIG instances beside whole cards ({', '.join(whole)})"
        return "MIG instances beside shards" if self.shards_per_card else ""

    def granularity_milli(self) -> int:
        """The finest share a shard gives: 1000 / shards per card (whole cards without shards)."""
        return MILLI_PER_GPU // self.shards_per_card if self.shards_per_card else MILLI_PER_GPU


def parse_node_gres(text: str) -> NodeGres:
    """A node's `gres` as slurmrestd lists it. On a MIG node `cards` counts its instances (gres
    indexes): pack_mig groups them into cards."""
    cards, shards, card_type, types = 0, 0, "", []
    for part in _split(text):
        if not (match := _ENTRY.match(part)):
            continue
        count = int(match["count"])
        if match["name"] == "gpu":
            cards += count
            card_type = card_type or (match["type"] or "")
            types += [match["type"] or ""] * count
        elif match["name"] == "shard":
            shards += count
    return NodeGres(cards, card_type, shards // cards if cards else 0, tuple(types))


def mig_profile(gres_type: str) -> str:
    """The MIG profile a gpu type names by its suffix ("a100_1g.10gb" -> "1g.10gb"; "" for none)."""
    match = _MIG_PROFILE.search(gres_type or "")
    return match["profile"] if match else ""


@dataclass(frozen=True)
class MigSlot:
    """Where the MIG instance of one gres index lies: its card (the node's card index), the instance
    (profile@start) and Slurm's type for it."""

    card: int
    instance: str
    gres_type: str


def pack_mig(gpu_types: Sequence[str], memory_mib: int) -> list[MigSlot]:
    """The node's MIG instances, by gres index, grouped into cards of `memory_mib` first fit (the
    module's docstring); LayoutError when a type is no profile of that card's geometry."""
    profiles = {p.name: p for p in geometry_for(memory_mib) or ()}
    if not profiles:
        raise LayoutError(f"a {memory_mib} MiB card has no MIG geometry (40 GB or 80 GB cards only)")
    layouts: list[list[Instance]] = []
    slots = []
    for gres_type in gpu_types:
        profile = profiles.get(mig_profile(gres_type))
        if profile is None:
            raise LayoutError(f"gpu type {gres_type!r} is no MIG profile of a {memory_mib} MiB card")
        card = next((c for c, layout in enumerate(layouts) if first_free(profile, layout)), len(layouts))
        if card == len(layouts):
            layouts.append([])
        instance = first_free(profile, layouts[card])
        layouts[card].append(instance)
        slots.append(MigSlot(card, str(instance), gres_type))
    return slots


def mig_layouts(slots: Sequence[MigSlot]) -> list[str]:
    """Each card's layout text (core.mig's form, by start), by card index."""
    cards = max((slot.card for slot in slots), default=-1) + 1
    return [
        ",".join(sorted((s.instance for s in slots if s.card == card), key=lambda i: int(i.split("@")[1])))
        for card in range(cards)
    ]


def _split(text: str) -> list[str]:
    """Split on the commas between entries, not those inside "(S:0,1)" or "(IDX:0,2)"."""
    parts, depth, current = [], 0, ""
    for char in text or "":
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


def job_gres(gpu_milli: int, num_gpus: int, granularity_milli: int) -> str:
    """What a request asks Slurm for: whole cards as `gpu:n`, a fraction as `shard:k` (k shards of
    `granularity_milli` each, rounded up: Slurm gives at least the share the portal placed)."""
    if gpu_milli >= MILLI_PER_GPU:
        return f"gpu:{num_gpus}"
    return f"shard:{-(-gpu_milli // granularity_milli)}"


def card_indexes(gres_detail: list[str]) -> list[int]:
    """The card indexes a running job holds, from its `gres_detail` (["shard:2(IDX:0)"],
    ["gpu:fake:2(IDX:0-1)"]); [] when Slurm does not say."""
    found: set[int] = set()
    for detail in gres_detail or []:
        for match in _INDEX.finditer(detail):
            for piece in match["ranges"].split(","):
                low, _, high = piece.partition("-")
                if low.isdigit():
                    found.update(range(int(low), int(high or low) + 1))
    return sorted(found)


def shard_count(gres_detail: list[str]) -> int:
    """The shards a running job holds, from its `gres_detail` (["shard:2(IDX:0)"] -> 2; 0 for cards)."""
    return sum(int(m["count"]) for detail in gres_detail or [] if (m := _SHARDS.match(detail)))


def mig_job_gres(gres_type: str, count: int) -> str:
    """What a request on MIG instances asks Slurm for: `count` gpus of the instances' type."""
    return f"gpu:{gres_type}:{count}"
