"""Pools, nodes and their agents' credentials: created, changed, drained and heard from here, each change
logged."""

import datetime as dt
from collections.abc import Mapping

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.events import log_event
from infra.echo import echoed
from scheduler_app.choices import NodeStatus
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.mig import LayoutError, format_layout, geometry_for, parse_layout
from scheduler_app.models import Allocation, Gpu, Node, Pool
from teams.permissions import can_operate, require
from teams.tokens import hash_token, new_token

SYSTEM = "system"
AGENT = "node agent"


def set_node_status(node: Node, status: str, *, actor=None, reason: str = "", actor_name: str = "") -> Node:
    """Drain, undrain, mark suspect, lost or reclaimed; logged like every state change."""
    if status not in NodeStatus.values:
        raise ValidationError(
            {
                "status": f"{echoed(status)!r} is not a node status; "
                f"choose from {', '.join(NodeStatus.values)}."
            }
        )
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.status == status:
            return locked
        from_state, locked.status = locked.status, status
        locked.save(update_fields=["status"])
        log_event(locked, status, from_state=from_state, actor=actor, actor_name=actor_name, reason=reason)
    node.refresh_from_db()
    return node


def record_heartbeat(node: Node, *, now: dt.datetime | None = None) -> Node:
    """The node's agent was heard from now; a suspect node becomes ready again, logged.

    The usual case is one UPDATE (which locks the row as the watchdog's check does); only a suspect
    node takes the locked read and the logged status change."""
    now = now or timezone.now()
    if Node.objects.filter(pk=node.pk).exclude(status=NodeStatus.SUSPECT).update(last_heartbeat_at=now):
        node.last_heartbeat_at = now
        return node
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        if locked.status == NodeStatus.SUSPECT:
            set_node_status(locked, NodeStatus.READY, actor_name=AGENT, reason="heartbeat resumed")
    node.refresh_from_db()
    return node


FOREIGN_EVENT = "foreign use"


def record_foreign_use(
    node: Node,
    cards: Mapping[int, tuple[int, int]],
    *,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    actor_name: str,
) -> bool:
    """What work the portal did not place holds on the node now, as its backend (the cluster manager
    that runs the node's work) sees it: per card index (milli-GPU, GPU memory MiB), and host CPU and
    memory. It replaces what was recorded (a card not named holds none), capped at each card's and the
    node's size: an observation, never refused. Nothing plans on it (the pass's snapshot, `place`'s
    re-check, the free capacity shown). Under the node's row lock, so a placement on the node waits
    for it; logged when it changes (True then)."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        changed, held_now = [], {}
        for gpu in Gpu.objects.filter(node=locked).order_by("index"):
            milli, memory = cards.get(gpu.index, (0, 0))
            held = (min(max(milli, 0), MILLI_PER_GPU), min(max(memory, 0), gpu.memory_mib))
            if any(held):
                held_now[str(gpu.index)] = list(held)
            if held != (gpu.foreign_milli, gpu.foreign_memory_mib):
                Gpu.objects.filter(pk=gpu.pk).update(foreign_milli=held[0], foreign_memory_mib=held[1])
                changed.append(f"gpu{gpu.index} {gpu.foreign_milli} → {held[0]} milli-GPU")
        host = (min(max(cpu_milli, 0), locked.cpu_milli), min(max(memory_mib, 0), locked.memory_mib))
        if host != (locked.foreign_cpu_milli, locked.foreign_memory_mib):
            locked.foreign_cpu_milli, locked.foreign_memory_mib = host
            locked.save(update_fields=["foreign_cpu_milli", "foreign_memory_mib"])
            changed.append(f"{host[0]} CPU milli-cores, {host[1]} MiB memory")
        if changed:
            log_event(
                locked,
                FOREIGN_EVENT,
                actor_name=actor_name,
                reason="held outside the portal: " + "; ".join(changed),
                data={"cards": held_now, "cpu_milli": host[0], "memory_mib": host[1]},
            )
    node.foreign_cpu_milli, node.foreign_memory_mib = locked.foreign_cpu_milli, locked.foreign_memory_mib
    return bool(changed)


def create_pool(
    *, name: str, gpu_model: str, capacity_type: str, granularity_milli: int = 125, **extra
) -> Pool:
    pool = Pool(
        name=name,
        gpu_model=gpu_model,
        capacity_type=capacity_type,
        granularity_milli=granularity_milli,
        **extra,
    )
    pool.full_clean()
    pool.save()
    return pool


def register_node(
    *, pool: Pool, name: str, cpu_milli: int, memory_mib: int, gpus: list[dict]
) -> tuple[Node, str]:
    """Add a node and its cards; returns the node and its agent credential, shown this once."""
    node = Node(pool=pool, name=name, cpu_milli=cpu_milli, memory_mib=memory_mib)
    node.full_clean(exclude=["agent_token_hash"])
    with transaction.atomic():
        node.save()
        for index, spec in enumerate(gpus):
            gpu = Gpu(node=node, index=index, **spec)
            gpu.full_clean()
            gpu.save()
        token = issue_agent_credential(node)
        log_event(node, node.status, reason="registered", actor_name=SYSTEM)
    return node, token


def issue_agent_credential(node: Node) -> str:
    """A fresh random credential for the node's agent; only its hash is stored."""
    token = new_token("node")
    Node.objects.filter(pk=node.pk).update(agent_token_hash=hash_token(token))
    node.agent_token_hash = hash_token(token)
    return token


def reissue_agent_credential(node: Node, *, actor=None, actor_name: str = "") -> str:
    """An operator's new credential for the node's agent (a lost one, a rebuilt host); the old one stops
    working at once. Logged; the secret is returned this once and stored only hashed."""
    if actor is not None:
        require(can_operate(actor), "Only platform operators issue node credentials.")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        token = issue_agent_credential(locked)
        log_event(
            locked, "credential issued", actor=actor, actor_name=actor_name, reason="new agent credential"
        )
    node.agent_token_hash = locked.agent_token_hash
    return token


def node_for_agent_token(token: str) -> Node | None:
    if not token:
        return None
    return Node.objects.filter(agent_token_hash=hash_token(token)).first()


def update_pool(pool: Pool, *, actor, **fields) -> Pool:
    """Operators change a pool's description, granularity, capacity type, backend or consolidation
    switch; logged with the old values. The backend changes only with no work on the pool's cards: who
    runs it cannot change under it."""
    require(can_operate(actor), "Only platform operators change pools.")
    allowed = {
        "description",
        "granularity_milli",
        "capacity_type",
        "gpu_model",
        "mig_mode",
        "backend",
        "consolidation",
    }
    if unknown := set(fields) - allowed:
        raise ValidationError({name: "This field cannot be changed here." for name in unknown})
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        if "mig_mode" in fields and fields["mig_mode"] != locked.mig_mode:
            _check_mig_mode_change(locked, fields["mig_mode"])
            if not fields["mig_mode"]:  # out of MIG, the cards are whole again
                Gpu.objects.filter(node__pool=locked).update(mig_layout="")
        moving = "backend" in fields and fields["backend"] != locked.backend
        if moving and Allocation.objects.committed().filter(gpu__node__pool=locked).exists():
            raise ValidationError({"backend": f"Pool {locked.name} has work on its cards: drain it first."})
        before = {name: getattr(locked, name) for name in fields}
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.full_clean()
        locked.save(update_fields=list(fields))
        change = ", ".join(f"{name}: {before[name]} → {value}" for name, value in fields.items())
        data = {name: {"from": before[name], "to": value} for name, value in fields.items()}
        log_event(locked, "updated", actor=actor, reason=change, data=data)
    return locked


def _check_mig_mode_change(pool: Pool, mode: str) -> None:
    """A pool enters or leaves MIG mode only with no work on its cards, and MIG only with cards that
    have a MIG geometry (40 or 80 GB A100/H100 class)."""
    cards = Gpu.objects.filter(node__pool=pool)
    if Allocation.objects.committed().filter(gpu__in=cards).exists():
        raise ValidationError({"mig_mode": f"Pool {pool.name} has work on its cards: drain it first."})
    if mode and (
        odd := next((g for g in cards.select_related("node") if not geometry_for(g.memory_mib)), None)
    ):
        raise ValidationError(
            {"mig_mode": f"{odd} ({odd.memory_mib} MiB) has no MIG geometry: 40 or 80 GB cards only."}
        )


def set_mig_layout(gpu: Gpu, layout: str, *, actor) -> Gpu:
    """Operators set a card's MIG layout (``profile@start,...``), checked against its geometry; the
    instances in use must stay. Logged with the old layout."""
    require(can_operate(actor), "Only platform operators set MIG layouts.")
    with transaction.atomic():
        locked = Gpu.objects.select_for_update(no_key=True).select_related("node__pool").get(pk=gpu.pk)
        if not locked.node.pool.mig_mode:
            raise ValidationError({"mig_layout": f"Pool {locked.node.pool.name} is not in MIG mode."})
        try:
            instances = parse_layout(layout, locked.memory_mib)
        except LayoutError as error:
            raise ValidationError({"mig_layout": f"Invalid MIG layout for {locked}: {error}."}) from None
        text = format_layout(instances)
        in_use = set(
            Allocation.objects.committed()
            .filter(gpu=locked)
            .exclude(mig_instance="")
            .values_list("mig_instance", flat=True)
        )
        if missing := sorted(in_use - {str(i) for i in instances}):
            raise ValidationError({"mig_layout": f"{locked} has instance {missing[0]} in use: keep it."})
        before, locked.mig_layout = locked.mig_layout, text
        locked.save(update_fields=["mig_layout"])
        log_event(
            locked.node,
            "mig_layout",
            actor=actor,
            reason=f"{locked}: {before or 'none'} → {text or 'none'}",
            data={"gpu": locked.index, "from": before, "to": text},
        )
    return locked
