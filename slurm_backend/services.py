"""Connecting a pool to a Slurm cluster and disconnecting it: the operator's writes here. The rest is
the sync's."""

from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.events import log_event
from scheduler_app.choices import Backend, MigMode
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.mig import COMPUTE_SLICES, LayoutError
from scheduler_app.models import Pool
from scheduler_app.services.inventory import update_pool
from slurm_backend.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_backend.gres import pack_mig, parse_node_gres
from slurm_backend.models import SlurmConnection
from slurm_backend.nodes import partition_nodes, sync_nodes
from teams.permissions import can_operate, require


def connect_pool(
    pool: Pool,
    *,
    actor,
    url: str,
    partition: str,
    output_dir: str,
    token: str | None = None,
    card_memory_mib: int = 81920,
) -> tuple[SlurmConnection, list[str]]:
    """Put `pool` in front of a Slurm partition, or change how it reaches it: slurmrestd is asked for
    the partition's nodes first (a ValidationError naming the field when it cannot say or lists none;
    nothing is written then), the pool's granularity becomes one shard of a card, its backend slurm,
    and its nodes and cards are imported. A partition whose gpus are MIG instances (typed gres named by
    profile) makes the pool's MIG mode fixed, its granularity one compute slice (1/7 of a card); one
    that mixes them with whole cards or shards is refused. `token`: the JWT for http(s); None keeps
    the one stored. Returns the connection and the problems the import found. Logged on the pool."""
    require(can_operate(actor), "Only platform operators connect pools to Slurm.")
    stored = SlurmConnection.objects.filter(pool=pool).first()
    connection = SlurmConnection(
        pool=pool, url=url, partition=partition, output_dir=output_dir, card_memory_mib=card_memory_mib
    )
    connection.set_token(stored.token() if token is None and stored else token or "")
    connection.full_clean(validate_unique=False)
    _check_reachable_settings(connection)
    try:
        listed = SlurmClient(url, connection.token()).nodes()
    except (SlurmUnavailable, SlurmError) as error:
        raise ValidationError({"url": str(error)}) from None
    nodes = partition_nodes(connection, listed)
    if not nodes:
        raise ValidationError({"partition": f"Slurm lists no node in partition {partition}."})
    changes = {"backend": Backend.SLURM}
    if (mig_mode := _mig_mode(connection, nodes)) != pool.mig_mode:
        changes["mig_mode"] = mig_mode
    shards = {parse_node_gres(n.get("gres", "")).granularity_milli() for n in nodes}
    if mig_mode:
        shards = {MILLI_PER_GPU // COMPUTE_SLICES}
    with transaction.atomic():
        connection.save()
        if len(shards) == 1 and (granularity := shards.pop()) != pool.granularity_milli:
            changes["granularity_milli"] = granularity
        pool = update_pool(pool, actor=actor, **changes)
        connection.pool = pool
        problems = sync_nodes(connection, listed)
        log_event(
            pool,
            "slurm connected",
            actor=actor,
            reason=f"slurmrestd {url}, partition {partition}",
            data={"url": url, "partition": partition, "problems": problems},
        )
    return connection, problems


def _mig_mode(connection: SlurmConnection, nodes: list[dict]) -> str:
    """The pool's MIG mode for the partition's gpus: fixed for MIG instances, off for whole cards; a
    ValidationError on `partition` when it mixes them (or a node's types fit no card of its memory)."""
    kinds = {}
    for node in nodes:
        gres = parse_node_gres(node.get("gres", ""))
        if why := gres.mixed():
            raise ValidationError({"partition": f"Slurm node {node['name']} has {why}: not supported."})
        if gres.mig:
            try:
                pack_mig(gres.gpu_types, connection.card_memory_mib)
            except LayoutError as error:
                raise ValidationError({"card_memory_mib": f"Slurm node {node['name']}: {error}."}) from None
        kinds.setdefault(gres.mig, node["name"])
    if len(kinds) > 1:
        raise ValidationError(
            {
                "partition": f"Partition {connection.partition} mixes MIG instances ({kinds[True]}) and "
                f"whole cards or shards ({kinds[False]}): give each kind its own partition and pool."
            }
        )
    return MigMode.FIXED if True in kinds else MigMode.OFF


def _check_reachable_settings(connection: SlurmConnection) -> None:
    """What the portal itself needs before it asks Slurm: a token for http(s), and the output directory
    on this host (the portal reads the jobs' output there)."""
    if not connection.url.startswith("unix:") and not connection.token_encrypted:
        raise ValidationError({"token": "slurmrestd over http(s) needs a JWT (scontrol token)."})
    folder = Path(connection.output_dir)
    if not folder.is_absolute() or not folder.is_dir():
        raise ValidationError(
            {"output_dir": f"{connection.output_dir} is not a directory on the portal's host."}
        )


def disconnect_pool(pool: Pool, *, actor) -> Pool:
    """Give the pool back to the portal's own agents: its backend becomes agent (only with no work on
    its cards, as update_pool says) and its Slurm connection is forgotten with its token; the nodes stay,
    to be run by agents or removed. Logged on the pool."""
    require(can_operate(actor), "Only platform operators disconnect pools from Slurm.")
    with transaction.atomic():
        connection = SlurmConnection.objects.select_for_update().filter(pool=pool).first()
        if connection is None:
            raise ValidationError({"pool": f"Pool {pool.name} is not connected to Slurm."})
        pool = update_pool(pool, actor=actor, backend=Backend.AGENT)
        url, partition = connection.url, connection.partition
        connection.delete()
        log_event(
            pool,
            "slurm disconnected",
            actor=actor,
            reason=f"slurmrestd {url}, partition {partition}",
            data={"url": url, "partition": partition},
        )
    return pool
