"""Work on a Slurm pool's nodes that the portal did not submit: another user's job in the partition, a
job of another partition sharing the nodes, one Slurm runs for itself. What it holds is recorded as
capacity held outside the portal (scheduler_app.services.inventory.record_foreign_use), so the pass
never plans on it and `place` refuses it under its locks.

A job holding `shard:k` on card i holds k shards of the pool's granularity there; `gpu:n` holds each of
its cards whole; GPU memory in proportion to the share. On a MIG node a gres index is an instance
(slurm_backend.nodes.mig_slots): the job holds that instance's compute share of its card. Host CPU
and memory are what Slurm allocated (its tres_alloc_str: memory only where memory is a consumable of
the cluster).
"""

import re
from collections import defaultdict

from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.mig import parse_layout
from scheduler_app.models import Gpu, Node
from scheduler_app.services.inventory import record_foreign_use
from slurm_backend.gres import card_indexes, shard_count
from slurm_backend.models import SlurmConnection, SlurmJob, SlurmNode
from slurm_backend.nodes import SLURM, mig_slots

HOLDING = {"RUNNING", "COMPLETING", "SUSPENDED"}  # a job in these states holds its gres
_RANGE = re.compile(r"^(?P<prefix>[^\[]*)\[(?P<ranges>[^\]]+)\](?P<suffix>.*)$")
_MEMORY_UNIT_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def expand_hostlist(text: str) -> list[str]:
    """Slurm's node list as names: "n1", "n[1-3,5]", "a1,b[01-02]" (zero padding kept)."""
    names, depth, current = [], 0, ""
    for char in (text or "") + ",":
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if current:
                names += _expand_one(current)
            current = ""
        else:
            current += char
    return names


def _expand_one(part: str) -> list[str]:
    match = _RANGE.match(part)
    if not match:
        return [part]
    names = []
    for piece in match["ranges"].split(","):
        low, _, high = piece.partition("-")
        for number in range(int(low), int(high or low) + 1):
            names.append(f"{match['prefix']}{str(number).zfill(len(low))}{match['suffix']}")
    return names


def card_shares(details: list[str], granularity_milli: int) -> dict[int, int]:
    """Per card index, the milli-GPU one node's gres_detail entries hold (["shard:8(IDX:0)"] ->
    {0: 1000}; ["gpu:fake:2(IDX:0-1)"] -> {0: 1000, 1: 1000}). Shards Slurm lists over several cards
    are spread over them evenly."""
    shares: dict[int, int] = defaultdict(int)
    for detail in details:
        indexes = card_indexes([detail])
        if not indexes:
            continue
        shards = shard_count([detail])
        if not shards:  # whole cards
            for index in indexes:
                shares[index] = MILLI_PER_GPU
            continue
        each, extra = divmod(shards, len(indexes))
        for n, index in enumerate(indexes):
            shares[index] = min(MILLI_PER_GPU, shares[index] + (each + (n < extra)) * granularity_milli)
    return dict(shares)


def host_share(job: dict, nodes: int) -> tuple[int, int]:
    """(CPU milli-cores, memory MiB) the job holds on each of its `nodes` nodes, from what Slurm
    allocated it (tres_alloc_str "cpu=2,mem=1000M,node=1")."""
    allocated = dict(
        item.split("=", 1) for item in (job.get("tres_alloc_str") or "").split(",") if "=" in item
    )
    cpu = int(allocated.get("cpu", "0") or 0) * 1000
    memory, unit = re.match(r"^([\d.]*)([KMGT]?)", allocated.get("mem", "")).groups()
    memory_mib = int(float(memory or 0) * _MEMORY_UNIT_MIB[unit or "M"])
    return cpu // max(nodes, 1), memory_mib // max(nodes, 1)


def instance_shares(details: list[str], slots: list[tuple[int, int]]) -> dict[int, int]:
    """Per card index, the milli-GPU the MIG instances of one node's gres_detail entries hold; `slots`:
    per gres index, (card index, the instance's milli-GPU)."""
    shares: dict[int, int] = defaultdict(int)
    for index in card_indexes(details):
        if index < len(slots):
            card, milli = slots[index]
            shares[card] = min(MILLI_PER_GPU, shares[card] + milli)
    return dict(shares)


def foreign_holds(
    listed: dict[int, dict],
    own: set[int],
    granularity_milli: int,
    mig: dict[str, list[tuple[int, int]]] | None = None,
) -> tuple[dict[str, dict[int, int]], dict[str, list[int]]]:
    """What the jobs not in `own` (the portal's job ids) hold, per node name: {card index: milli-GPU},
    and [CPU milli-cores, memory MiB]. `mig`: the MIG nodes' instance_shares slots, by node name."""
    mig = mig or {}
    cards: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for job_id, job in listed.items():
        if job_id in own or job.get("job_state") not in HOLDING:
            continue
        names = expand_hostlist(job.get("nodes") or "")
        details = job.get("gres_detail") or []
        per_node = [details[i : i + 1] for i in range(len(names))] if len(details) == len(names) else None
        cpu, memory = host_share(job, len(names))
        for i, name in enumerate(names):
            mine = per_node[i] if per_node else details
            shares = instance_shares(mine, mig[name]) if name in mig else card_shares(mine, granularity_milli)
            for index, milli in shares.items():
                cards[name][index] = min(MILLI_PER_GPU, cards[name][index] + milli)
            host[name][0] += cpu
            host[name][1] += memory
    return cards, host


def slurm_foreign_holds(
    connection: SlurmConnection, listed: dict[int, dict]
) -> tuple[dict[str, dict[int, int]], dict[str, list[int]]]:
    """foreign_holds() of the listed jobs that are not a Slurm job of the portal's on this connection."""
    own = set(
        SlurmJob.objects.filter(connection=connection, job_id__in=list(listed)).values_list(
            "job_id", flat=True
        )
    )
    return foreign_holds(listed, own, connection.pool.granularity_milli, _mig_slots(connection))


def _mig_slots(connection: SlurmConnection) -> dict[str, list[tuple[int, int]]]:
    """Per MIG node of the pool, by name: each gres index's (card index, instance milli-GPU)."""
    found = {}
    for name, gres_text in SlurmNode.objects.filter(node__pool=connection.pool_id).values_list(
        "node__name", "gres"
    ):
        if slots := mig_slots(connection, gres_text):
            found[name] = [
                (slot.card, parse_layout(slot.instance, connection.card_memory_mib)[0].profile.milli)
                for slot in slots
            ]
    return found


def record_foreign(connection: SlurmConnection, listed: dict[int, dict]) -> None:
    """Record on each node of the pool what Slurm's jobs that are not the portal's hold (none: cleared).
    Only the nodes whose record changes are written (record_foreign_use, under the node's lock)."""
    cards, host = slurm_foreign_holds(connection, listed)
    gpus = defaultdict(dict)
    for gpu in Gpu.objects.filter(node__pool=connection.pool_id):
        gpus[gpu.node_id][gpu.index] = gpu
    for node in Node.objects.filter(pool=connection.pool_id):
        held = {
            index: (milli, milli * gpus[node.pk][index].memory_mib // MILLI_PER_GPU)
            for index, milli in cards.get(node.name, {}).items()
            if index in gpus[node.pk]
        }
        cpu, memory = host.get(node.name, (0, 0))
        cpu, memory = min(cpu, node.cpu_milli), min(memory, node.memory_mib)  # as the owner caps them
        now = {
            index: (gpu.foreign_milli, gpu.foreign_memory_mib)
            for index, gpu in gpus[node.pk].items()
            if gpu.foreign_milli or gpu.foreign_memory_mib
        }
        if now != held or (node.foreign_cpu_milli, node.foreign_memory_mib) != (cpu, memory):
            record_foreign_use(node, held, cpu_milli=cpu, memory_mib=memory, actor_name=SLURM)
