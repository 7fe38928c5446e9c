"""The pool's nodes and cards kept as Slurm lists its partition, through the inventory's own owners
(register_node, reconcile_gpus, set_node_status, handle_node_loss, record_heartbeat).

Slurm's state maps to the node's status: idle, mixed, allocated -> ready; drain (drained, draining)
-> draining, except on a node the portal reclaimed (a spot notice), which the portal drains in Slurm
itself (drain_reclaimed); down, fail or not responding -> lost, through the lost-node path, so its
work is requeued from its checkpoint. Only a change of what Slurm says moves the portal's node, so an
operator's own drain in the portal stays. A node Slurm answers for counts as heard from.

A node whose gpus are MIG instances (typed gres named by profile, slurm_backend.gres) becomes cards
whose layouts hold them, grouped as gres.pack_mig says, in a pool in fixed MIG mode (services.connect_pool
sets it). Its cards are imported once: a later change of its instances in Slurm is reported, not
followed (the instances Slurm lists are those the portal places on only while they match).
"""

from django.db import transaction

from scheduler_app.choices import MigMode, NodeStatus
from scheduler_app.core.mig import LayoutError
from scheduler_app.models import Node
from scheduler_app.services.agents import reconcile_gpus
from scheduler_app.services.inventory import record_heartbeat, register_node, set_node_status
from scheduler_app.services.node_health import handle_node_loss
from slurm_backend.client import SlurmError
from slurm_backend.control import drain_node
from slurm_backend.gres import MigSlot, NodeGres, mig_layouts, pack_mig, parse_node_gres
from slurm_backend.models import SlurmConnection, SlurmNode

SLURM = "slurm"
LOST_STATES = {"down", "fail", "failing", "future", "unknown"}
LOST_FLAGS = {"NOT_RESPONDING", "FAIL", "POWERED_DOWN", "POWER_DOWN"}
DRAIN_FLAGS = {"DRAIN", "DRAINED", "DRAINING"}


def status_for(state: str, flags: list[str]) -> str:
    """The portal's node status for Slurm's base state and flags."""
    flags = {flag.upper() for flag in flags}
    if state.lower() in LOST_STATES or flags & LOST_FLAGS:
        return NodeStatus.LOST
    if state.lower() in ("drained", "draining") or flags & DRAIN_FLAGS:
        return NodeStatus.DRAINING
    return NodeStatus.READY


def card_uuid(connection: SlurmConnection, node_name: str, index: int) -> str:
    """A card's stable id: Slurm names no UUIDs, so the pool, node and gres index (on a MIG node, the
    card's index in gres.pack_mig's grouping) stand for one."""
    return f"SLURM-{connection.pool.name}-{node_name}-{index}"


def partition_nodes(connection: SlurmConnection, listed: list[dict]) -> list[dict]:
    return [n for n in listed if connection.partition in (n.get("partitions") or [])]


def sync_nodes(connection: SlurmConnection, listed: list[dict]) -> list[str]:
    """Make the pool's nodes what Slurm lists in the partition; returns the problems found (a node
    name taken by another pool, a node without cards), for the connection's last error."""
    problems = []
    for entry in partition_nodes(connection, listed):
        gres = parse_node_gres(entry.get("gres", ""))
        name = entry["name"]
        if not gres.cards:
            problems.append(f"Slurm node {name} has no gpu gres")
            continue
        if why := _mig_refusal(connection, gres):
            problems.append(f"Slurm node {name}: {why}")
            continue
        node = Node.objects.filter(name=name).select_related("pool").first()
        if node is not None and node.pool_id != connection.pool_id:
            problems.append(f"Slurm node {name} is already a node of pool {node.pool.name}")
            continue
        if node is None:
            node = _add(connection, entry, gres)
        elif changed := _reconcile_cards(connection, node, gres):
            problems.append(changed)
        _follow_state(connection, node, entry)
    return problems


def _mig_refusal(connection: SlurmConnection, gres: NodeGres) -> str:
    """Why the node's gpus do not fit the pool's MIG mode ("" when they do)."""
    if why := gres.mixed():
        return why
    if gres.mig != bool(connection.pool.mig_mode):
        kind = "MIG instances" if gres.mig else "whole cards"
        return f"{kind}, in a pool {'not ' if gres.mig else ''}in MIG mode: connect the pool again"
    if gres.mig:
        try:
            pack_mig(gres.gpu_types, connection.card_memory_mib)
        except LayoutError as error:
            return str(error)
    return ""


def mig_slots(connection: SlurmConnection, gres_text: str) -> list[MigSlot]:
    """Where each gres index of a MIG node's gres lies (gres.pack_mig); [] on a node of whole cards."""
    gres = parse_node_gres(gres_text)
    return pack_mig(gres.gpu_types, connection.card_memory_mib) if gres.mig and not gres.mixed() else []


def mig_instances(
    connection: SlurmConnection, node: Node, indexes: list[int]
) -> list[tuple[int, str]] | None:
    """The (card index, instance) of each gres index Slurm gave a job on `node`, as its gres last read
    maps them (mig_slots); None on a node of whole cards. An index beyond them is left out."""
    gres_text = SlurmNode.objects.filter(node=node).values_list("gres", flat=True).first() or ""
    if not (slots := mig_slots(connection, gres_text)):
        return None
    return [(slots[i].card, slots[i].instance) for i in indexes if i < len(slots)]


def _cards(connection: SlurmConnection, name: str, gres: NodeGres) -> list[dict]:
    layouts = mig_layouts(pack_mig(gres.gpu_types, connection.card_memory_mib)) if gres.mig else []
    return [
        {
            "uuid": card_uuid(connection, name, index),
            "model": connection.pool.gpu_model,
            "memory_mib": connection.card_memory_mib,
            **({"mig_layout": layouts[index], "mig_capable": True, "mig_enabled": True} if layouts else {}),
        }
        for index in range(len(layouts) or gres.cards)
    ]


def _add(connection: SlurmConnection, entry: dict, gres: NodeGres) -> Node:
    node, _ = register_node(
        pool=connection.pool,
        name=entry["name"],
        cpu_milli=int(entry.get("cpus") or 1) * 1000,
        memory_mib=int(entry.get("real_memory") or 1),
        gpus=_cards(connection, entry["name"], gres),
    )
    return node


def _reconcile_cards(connection: SlurmConnection, node: Node, gres: NodeGres) -> str:
    """Add the cards Slurm lists beyond the node's; on a MIG node, say where its instances changed."""
    cards = _cards(connection, node.name, gres)
    if connection.pool.mig_mode == MigMode.FIXED and gres.mig:
        have = list(node.gpus.order_by("index").values_list("mig_layout", flat=True))
        if have != [card["mig_layout"] for card in cards]:
            now = [card["mig_layout"] for card in cards]
            return (
                f"Slurm node {node.name}'s MIG instances changed: its gres packs as {now}, its cards {have}"
            )
    elif node.gpus.count() != gres.cards:
        reconcile_gpus(node, [{**card, "mig_mode": "unsupported"} for card in cards])
    return ""


def _follow_state(connection: SlurmConnection, node: Node, entry: dict) -> None:
    flags = entry.get("state_flags") or []
    state = " ".join([entry.get("state", ""), *flags]).strip()
    status = status_for(entry.get("state", ""), flags)
    reason = f"Slurm: {state}" + (f" ({entry['reason']})" if entry.get("reason") else "")
    with transaction.atomic():
        seen = SlurmNode.objects.select_for_update().filter(node=node).first()
        reclaimed = node.status == NodeStatus.RECLAIMED  # the drain Slurm shows is the portal's own
        if status != NodeStatus.LOST:
            node = record_heartbeat(node)
        if seen is None or seen.status != status:
            if status == NodeStatus.LOST and node.status != NodeStatus.LOST:
                handle_node_loss(node, reason=reason)
            elif status != NodeStatus.LOST and not (reclaimed and status == NodeStatus.DRAINING):
                set_node_status(node, status, actor_name=SLURM, reason=reason)
        SlurmNode.objects.update_or_create(
            node=node,
            defaults={
                "connection": connection,
                "state": state[:100],
                "status": status,
                "gres": (entry.get("gres") or "")[:500],
            },
        )


def drain_reclaimed(connection: SlurmConnection) -> list[str]:
    """Drain in Slurm each node of the pool the portal has reclaimed (a spot notice) and Slurm has not
    drained yet, so Slurm starts nothing there either; returns the problems."""
    problems = []
    for seen in (
        SlurmNode.objects.filter(connection=connection, node__status=NodeStatus.RECLAIMED)
        .exclude(status__in=[NodeStatus.DRAINING, NodeStatus.LOST])
        .select_related("node")
    ):
        try:
            drain_node(seen.node.name, f"gpu-portal: spot reclaim of {seen.node.name}")
        except SlurmError as error:
            problems.append(str(error))
    return problems
