"""The portal's picture of a Slurm pool against Slurm's own: the invariant check's backend part
(registered with scheduler_app.rules.invariants by SlurmBackendConfig.ready()).

Every open slice of a run the portal counts as started (running, migrating) is held by a running Slurm
job of that run on the slice's node and card, with shards enough for its share; every running Slurm
job the portal submitted holds such a slice, unless the portal has already asked it to stop. On a MIG
node the job holds the slice's very instance (its gres index, as slurm_backend.nodes.mig_instances maps
it). Runs not started yet (scheduled: Slurm may still hold the job pending) are not compared. Each card
holds outside the portal what Slurm's other jobs hold on it (slurm_backend.foreign).
"""

from scheduler_app.choices import Backend, RequestState
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation, Gpu
from slurm_backend.client import SlurmClient, SlurmError, SlurmUnavailable
from slurm_backend.foreign import slurm_foreign_holds
from slurm_backend.gres import card_indexes, shard_count
from slurm_backend.models import SlurmConnection, SlurmJob
from slurm_backend.nodes import mig_instances

STARTED = (RequestState.RUNNING, RequestState.MIGRATING)


def differences(connection: SlurmConnection, listed: list[dict] | None = None) -> list[str]:
    """Where the pool's open slices and Slurm's running jobs disagree, in words (empty: none).
    `listed`: Slurm's jobs as slurmrestd lists them (read here when not given)."""
    if listed is None:
        listed = SlurmClient(connection.url, connection.token()).jobs()
    runs = {
        row.job_id: row
        for row in SlurmJob.objects.filter(connection=connection, job_id__in=[j["job_id"] for j in listed])
    }
    running = {
        (runs[job["job_id"]].request_id, runs[job["job_id"]].generation): job
        for job in listed
        if job["job_state"] == "RUNNING" and job["job_id"] in runs
    }
    problems, held = [], set()
    slices = Allocation.objects.committed().filter(gpu__node__pool=connection.pool_id)
    for piece in slices.select_related("request", "gpu__node").order_by("pk"):
        request = piece.request
        held.add((request.pk, request.placements))
        if request.state not in STARTED:
            continue
        job = running.get((request.pk, request.placements))
        where = f"request #{request.pk}'s {piece.milli} milli-GPU on {piece.gpu}"
        if job is None:
            problems.append(f"{where}: no running Slurm job of run {request.placements}")
            continue
        gres, shard_milli = job["gres_detail"], connection.pool.granularity_milli
        if piece.mig_instance:
            instances = mig_instances(connection, piece.gpu.node, card_indexes(gres)) or []
            if (
                job.get("nodes") != piece.gpu.node.name
                or (piece.gpu.index, piece.mig_instance) not in instances
            ):
                problems.append(
                    f"{where} (MIG {piece.mig_instance}): Slurm job {job['job_id']} runs on "
                    f"{job.get('nodes')} {gres}, instances {instances}"
                )
        elif job.get("nodes") != piece.gpu.node.name or piece.gpu.index not in card_indexes(gres):
            problems.append(f"{where}: Slurm job {job['job_id']} runs on {job.get('nodes')} {gres}")
        elif piece.milli < MILLI_PER_GPU and shard_count(gres) * shard_milli < piece.milli:
            problems.append(f"{where}: Slurm job {job['job_id']} holds only {gres}")
    problems += _foreign_differences(connection, listed)
    stopping = {(row.request_id, row.generation) for row in runs.values() if row.stop_sent_at is not None}
    for key, job in sorted(running.items()):
        if key not in held and key not in stopping:
            problems.append(
                f"Slurm job {job['job_id']} ({job['name']}) runs on {job.get('nodes')} "
                f"without a slice in the portal"
            )
    return problems


def _foreign_differences(connection: SlurmConnection, listed: list[dict]) -> list[str]:
    """Each card of the pool holds outside the portal what Slurm's jobs that are not the portal's hold
    on it (slurm_backend.foreign: what the last sync recorded)."""
    cards, _ = slurm_foreign_holds(connection, {job["job_id"]: job for job in listed})
    problems = []
    for gpu in Gpu.objects.filter(node__pool=connection.pool_id).select_related("node").order_by("pk"):
        slurm_holds = cards.get(gpu.node.name, {}).get(gpu.index, 0)
        if gpu.foreign_milli != slurm_holds:
            problems.append(
                f"{gpu} holds {gpu.foreign_milli} milli-GPU outside the portal; "
                f"Slurm's jobs that are not the portal's hold {slurm_holds}"
            )
    return problems


def all_differences() -> list[str]:
    """differences() of every Slurm pool the portal has work on (an unreachable slurmrestd is one)."""
    problems = []
    connections = SlurmConnection.objects.select_related("pool").filter(pool__backend=Backend.SLURM)
    for connection in connections:
        busy = (
            SlurmJob.objects.filter(connection=connection, ended_at__isnull=True).exists()
            or Allocation.objects.committed().filter(gpu__node__pool=connection.pool_id).exists()
            or Gpu.objects.filter(node__pool=connection.pool_id, foreign_milli__gt=0).exists()
        )
        if not busy:
            continue
        try:
            problems += [f"pool {connection.pool.name}: {p}" for p in differences(connection)]
        except (SlurmUnavailable, SlurmError) as error:
            problems.append(f"pool {connection.pool.name}: cannot compare with Slurm: {error}")
    return problems
