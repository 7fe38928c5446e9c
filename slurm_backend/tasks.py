"""Celery tasks: thin wrappers that call one service each."""

from celery import shared_task

from slurm_backend.sync import sync_all


@shared_task(name="slurm_backend.sync", ignore_result=True)
def sync() -> dict[str, str]:
    """Every Slurm pool's sync (claimed per pool: a repeated or overlapping run waits its turn)."""
    return sync_all()
