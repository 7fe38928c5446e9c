"""A Slurm job's checkpoints, read as the agent reads them: the job (or the SDK's checkpointed())
touches `.checkpointed` in its GPU_PORTAL_CHECKPOINT_DIR after each checkpoint, and the marker's mtime is
the checkpoint's time. The directory is on storage the Slurm nodes share with the portal (as the jobs'
output is); the job's script creates it as the job's account, so CHECKPOINT_ROOT must let the accounts
create their directories there (mode 1777, as /tmp)."""

import contextlib
import datetime as dt
from pathlib import Path

from agent.jobs import checkpoint_time
from scheduler_app.models import GpuRequest, Node
from scheduler_app.services.agents import NotOnThisNode, checkpoint_dir, record_checkpoint


def found(request: GpuRequest) -> dt.datetime | None:
    """The checkpoint in the request's directory now (None: none): what a run that starts resumes from."""
    return checkpoint_time(Path(checkpoint_dir(request)))


def report_new(node: Node, request: GpuRequest, generation: int) -> None:
    """Record the run's checkpoint if the marker is newer than the one the request keeps; a run that
    is no longer the request's current one on this node reports nothing."""
    at = found(request)
    if at is None or (request.last_checkpoint_at and at <= request.last_checkpoint_at):
        return
    with contextlib.suppress(NotOnThisNode):
        record_checkpoint(node, request.pk, at, generation=generation)
