"""A request on a Slurm pool shows running soon after Slurm starts it: the pass that places it has the
pool synced at once (its job submitted without waiting for the sync's interval), and between syncs
follow_starts asks Slurm after the jobs just submitted. Against the real daemons."""

import pytest
from django.utils import timezone

from scheduler_app.choices import RequestState
from scheduler_app.passes import dispatch
from scheduler_app.passes.run import run_scheduling_pass
from slurm_backend.models import SlurmConnection, SlurmJob
from slurm_backend.sync import follow_starts, sync_pool
from tests.slurm_backend.conftest import state_of, submit
from tests.waiting import wait_until


def test_follow_starts_alone_moves_a_submitted_job_to_running_and_leaves_a_claimed_pool_to_its_sync(
    slurm_pool, member, team, team_accounts
):
    request = submit(member, team, "quick", "sleep 300")
    run_scheduling_pass()
    sync_pool(slurm_pool)  # submits the job
    job = SlurmJob.objects.get(request=request)

    # While another sync holds the pool, follow_starts asks nothing.
    until = timezone.now() + timezone.timedelta(seconds=60)
    SlurmConnection.objects.filter(pk=slurm_pool.pk).update(sync_claimed_until=until)
    assert follow_starts() == 0
    assert state_of(request) == RequestState.SCHEDULED
    SlurmConnection.objects.filter(pk=slurm_pool.pk).update(sync_claimed_until=None)

    wait_until(
        lambda: follow_starts() >= 0 and state_of(request) == RequestState.RUNNING,
        what="follow_starts to see the job running",
        step_s=0.25,
    )
    job.refresh_from_db()
    assert job.state == "RUNNING" and job.cards  # the cards Slurm gave are recorded, as by a sync
    assert SlurmConnection.objects.get(pk=slurm_pool.pk).sync_claimed_until is None
    assert follow_starts() == 0  # a running job is not asked after again


class Recorder:
    """Stands in for the embedded sync thread, or for the Celery task: counts the runs asked for."""

    def __init__(self):
        self.runs = 0

    def wake(self):
        self.runs += 1

    def apply_async(self, **options):
        self.runs += 1


@pytest.mark.parametrize("mode", ["embedded", "celery"])
def test_a_pass_that_places_work_on_a_slurm_pool_runs_its_sync_at_once(
    mode, slurm_pool, member, team, team_accounts, monkeypatch, settings, django_capture_on_commit_callbacks
):
    sync = Recorder()
    if mode == "embedded":
        settings.REDIS_URL = ""  # the embedded default, whatever this run's services
        monkeypatch.setitem(dispatch._EMBEDDED_FOR_ENTRY, "slurm-sync", sync)
    else:
        settings.REDIS_URL = "redis://127.0.0.1:6379/15"
        tasks = {settings.CELERY_BEAT_SCHEDULE["slurm-sync"]["task"]: sync}
        monkeypatch.setattr(dispatch, "registered_task", tasks.__getitem__)
    submit(member, team, "placed", "sleep 300")
    with django_capture_on_commit_callbacks(execute=True):
        run_scheduling_pass()
    assert sync.runs == 1

    with django_capture_on_commit_callbacks(execute=True):
        run_scheduling_pass()  # nothing new to place or stop: the sync keeps its interval
    assert sync.runs == 1
