"""Celery tasks: thin wrappers that call one service each."""

from celery import shared_task

from slurm_backend.sync import follow_starts, sync_all


@shared_task(name="slurm_backend.sync", ignore_result=True)
def sync() -> dict[str, str]:
    """Every Slurm pool's sync (claimed per pool: a repeated or overlapping run waits its turn)."""
    return sync_all()


@shared_task(name="slurm_backend.follow_starts", ignore_result=True)
def follow_starts_task() -> int:
    """Between syncs, the jobs just submitted and not yet running (see follow_starts)."""
    return follow_starts()
