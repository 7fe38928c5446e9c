"""Connecting a pool to a Slurm cluster: the operator's one write here. The rest is the sync's."""

from django.db import transaction

from audit.events import log_event
from scheduler_app.choices import Backend
from scheduler_app.models import Pool
from scheduler_app.services.inventory import update_pool
from slurm_backend.client import SlurmClient
from slurm_backend.gres import parse_node_gres
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
    token: str = "",
    card_memory_mib: int = 81920,
) -> tuple[SlurmConnection, list[str]]:
    """Put `pool` in front of a Slurm partition: slurmrestd is asked for the partition's nodes first
    (SlurmUnavailable or SlurmError when it cannot say; nothing is written then), the pool's
    granularity becomes one shard of a card, its backend slurm, and its nodes and cards are imported.
    Returns the connection and the problems the import found. Logged on the pool."""
    require(can_operate(actor), "Only platform operators connect pools to Slurm.")
    connection = SlurmConnection(
        pool=pool, url=url, partition=partition, output_dir=output_dir, card_memory_mib=card_memory_mib
    )
    connection.set_token(token)
    connection.full_clean(validate_unique=False)
    listed = SlurmClient(url, token).nodes()
    shards = {
        parse_node_gres(n.get("gres", "")).granularity_milli() for n in partition_nodes(connection, listed)
    }
    with transaction.atomic():
        connection.save()
        changes = {"backend": Backend.SLURM}
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
