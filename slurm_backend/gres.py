"""Slurm's gres strings, read and written: a node's cards and shards, a job's request and the card
indexes Slurm gave it. Pure functions."""

import re
from dataclasses import dataclass

from scheduler_app.constants import MILLI_PER_GPU

# "gpu:fake:4", "shard:fake:32", "gpu:a100:2(S:0-1)", "gpu:4"
_ENTRY = re.compile(r"(?P<name>[a-z]+)(?::(?P<type>[^:(,]+))?:(?P<count>\d+)")
_INDEX = re.compile(r"IDX:(?P<ranges>[\d,\-]+)")
_SHARDS = re.compile(r"^shard(?::[^:(]+)?:(?P<count>\d+)")


@dataclass(frozen=True)
class NodeGres:
    """A node's cards (`cards` of `card_type`, "" untyped) and the shards of each card."""

    cards: int
    card_type: str
    shards_per_card: int

    def granularity_milli(self) -> int:
        """The finest share a shard gives: 1000 / shards per card (whole cards without shards)."""
        return MILLI_PER_GPU // self.shards_per_card if self.shards_per_card else MILLI_PER_GPU


def parse_node_gres(text: str) -> NodeGres:
    """A node's `gres` as slurmrestd lists it. Typed gpus of several types (MIG instances) count as
    cards of the first type: MIG on Slurm is not mapped yet."""
    cards, shards, card_type = 0, 0, ""
    for part in _split(text):
        if not (match := _ENTRY.match(part)):
            continue
        count = int(match["count"])
        if match["name"] == "gpu":
            cards += count
            card_type = card_type or (match["type"] or "")
        elif match["name"] == "shard":
            shards += count
    return NodeGres(cards, card_type, shards // cards if cards else 0)


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
