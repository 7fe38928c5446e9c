"""A work item (scheduler_app.selectors.node_work) as a Slurm batch job: pinned to its node, its slice
as gres, its time limit, its stop signal, its account, its identity and an allow-listed environment.

The job runs as the Unix account the portal maps its user or team to, never as the portal's: over
HTTP(S) the submission names that user (X-SLURM-USER-NAME with SlurmUser's JWT), so Slurm itself runs
it as them; over a Unix socket (rest_auth/local) Slurm runs it as the portal's own user, and the
script's first act is to give that up for the account (setpriv), failing the job if it cannot.
"""

import math
import shlex

from django.conf import settings

from slurm_backend.gres import job_gres, mig_job_gres
from slurm_backend.models import SlurmConnection, SlurmNode
from slurm_backend.nodes import mig_slots

PATH = "/usr/local/bin:/usr/bin:/bin"
HOLD = "exec sleep infinity"  # no command: the capacity is held until released, as salloc would


def job_name(request_id: int, generation: int) -> str:
    """The Slurm job's name: a submission that was lost after Slurm took it is found again by it."""
    return f"portal-{request_id}-{generation}"


def output_path(connection: SlurmConnection, request_id: int, generation: int) -> str:
    return f"{connection.output_dir.rstrip('/')}/{job_name(request_id, generation)}.out"


def account_name(work: dict, team_default: str) -> str:
    """The Unix account the job runs as: the portal's mapping, else the team's default account."""
    return work["unix_account"] or team_default


def environment(work: dict, account: str) -> dict:
    """The job's whole environment, an allow-list as the agent gives it: the account's identity, the
    team's secrets and the request's own variables, then the slice's GPU_PORTAL_* variables, which
    nothing overrides. CUDA_VISIBLE_DEVICES is Slurm's to set, from the gres it gives."""
    milli = min(g["milli"] for g in work["gpus"])
    memory = min(g["memory_mib"] for g in work["gpus"])
    return {
        "PATH": PATH,
        "USER": account,
        "LOGNAME": account,
        **(work.get("environment") or {}),
        "GPU_PORTAL_REQUEST_ID": str(work["request_id"]),
        "GPU_PORTAL_TASK_TYPE": work["task_type"],
        "GPU_PORTAL_GPU_MILLI": str(milli),
        "GPU_PORTAL_GPU_MEMORY_MIB": str(memory),
        "GPU_PORTAL_CHECKPOINT_DIR": work["checkpoint_dir"],
        "PYTHONUNBUFFERED": "1",
    }


def script(work: dict, account: str) -> str:
    """The batch script: drop to `account` when Slurm started it as root, then run the command."""
    # The account makes its checkpoint directory (slurm_backend.checkpoints), as the agent does.
    command = 'mkdir -p "$GPU_PORTAL_CHECKPOINT_DIR" 2>/dev/null; ' + (work["command"].strip() or HOLD)
    run = f"/bin/sh -c {shlex.quote(command)}"
    user = shlex.quote(account)
    return (
        "#!/bin/sh\n"
        'if [ "$(id -u)" = 0 ]; then\n'
        f'  exec setpriv --reuid={user} --regid="$(id -g {user})" --init-groups '
        f'env HOME="$(getent passwd {user} | cut -d: -f6)" {run}\n'
        "fi\n"
        f"exec {run}\n"
    )


def gres(connection: SlurmConnection, node_name: str, gpus: list[dict]) -> str:
    """The job's gres: shards or whole cards (gres.job_gres), or on MIG instances `count` gpus of the
    instances' Slurm type (the node's gres names it). Slurm may give other instances of that type than
    those planned: the sync follows what it gave (slurm_backend.mig)."""
    if not gpus[0].get("mig_instance"):
        return job_gres(gpus[0]["milli"], len(gpus), connection.pool.granularity_milli)
    profile = gpus[0]["mig_instance"].partition("@")[0]
    node_gres = SlurmNode.objects.filter(node__name=node_name).values_list("gres", flat=True).first() or ""
    types = {slot.instance.partition("@")[0]: slot.gres_type for slot in mig_slots(connection, node_gres)}
    return mig_job_gres(types.get(profile, profile), len(gpus))


def description(
    connection: SlurmConnection,
    node_name: str,
    work: dict,
    *,
    account: str,
    slurm_account: str,
    max_duration_s: int | None,
) -> dict:
    """The `job` of POST /job/submit. `nodelist` pins it to the node the portal placed it on (22.05's
    REST refuses `required_nodes`; `nodelist`, the sbatch option's name, is taken); its `signal`
    warns the job's steps SLURM_STOP_GRACE_S before its time limit (22.05's REST refuses the batch
    shell's `B:` flag)."""
    gpus = work["gpus"]
    job = {
        "name": job_name(work["request_id"], work["generation"]),
        "partition": connection.partition,
        "nodelist": node_name,
        "gres": gres(connection, node_name, gpus),
        "cpus_per_task": max(1, math.ceil(work["cpu_milli"] / 1000)),
        "memory_per_node": work["memory_mib"],
        "current_working_directory": "/tmp",
        "standard_output": output_path(connection, work["request_id"], work["generation"]),
        "environment": environment(work, account),
        "requeue": False,
    }
    if max_duration_s:
        job["time_limit"] = max(1, math.ceil(max_duration_s / 60))
        if settings.SLURM_STOP_GRACE_S:
            job["signal"] = f"TERM@{settings.SLURM_STOP_GRACE_S}"
    if slurm_account:
        job["account"] = slurm_account
    return job
