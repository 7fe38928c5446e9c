"""slurm_check_billing against the real daemons: runs of a few seconds are billed what Slurm recorded,
within its one-second rounding; a segment changed afterwards is reported and the command fails."""

import datetime as dt
import functools
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduler_app.choices import RequestState
from scheduler_app.models import Allocation
from scheduler_app.services.requests import cancel_request, submit_request
from slurm_backend.billing_check import parse_sacct
from slurm_backend.models import SlurmJob
from tests.slurm_backend.conftest import slurm, sync_until
from tests.slurm_backend.test_slurm_pool import state_of


def check(**options) -> tuple[str, str]:
    """What slurm_check_billing prints, and its error ("" when it exits 0)."""
    out = StringIO()
    try:
        call_command("slurm_check_billing", stdout=out, **options)
    except CommandError as error:
        return out.getvalue(), str(error)
    return out.getvalue(), ""


@pytest.fixture
def finished_runs(slurm_pool, team_accounts, member, team):
    """Two runs of a few seconds, ended: one a fraction of a card, one two whole cards."""
    requests = [
        submit_request(
            user=member, team=team, pool_name="slurm", name=f"short{i}", command="sleep 3", **shape
        )
        for i, shape in enumerate([{"gpu_milli": 250}, {"gpu_milli": 1000, "num_gpus": 2}])
    ]
    sync_until(
        slurm_pool,
        lambda: all(state_of(r) == RequestState.SUCCEEDED for r in requests),
        what="both runs succeeded",
    )
    return requests


def test_runs_of_a_few_seconds_are_billed_what_slurm_recorded(finished_runs):
    shown, error = check()

    assert error == "" and "2 ended run(s): 0 differ by more than 1 s." in shown, shown
    for job in SlurmJob.objects.all():
        assert f"ok: pool slurm job {job.job_id} (request {job.request_id} run 1)" in shown


def test_a_tampered_segment_is_reported_and_the_command_fails(finished_runs):
    tampered = Allocation.objects.filter(request=finished_runs[0]).get()
    Allocation.objects.filter(pk=tampered.pk).update(ended_at=tampered.ended_at + dt.timedelta(seconds=2))
    job = SlurmJob.objects.get(request=finished_runs[0])

    shown, error = check()

    assert error == "2 ended run(s): 1 differ by more than 1 s.", shown
    assert f"DIFFERS: pool slurm job {job.job_id}" in shown
    assert shown.count("ok: pool slurm job") == 1


def test_a_run_the_portal_stopped_is_billed_until_the_stop(slurm_pool, team_accounts, member, team):
    """Slurm records the job until it ended after the signal; the bill ends at the cancel."""
    request = submit_request(
        user=member, team=team, pool_name="slurm", name="long", gpu_milli=125, command="sleep 300"
    )
    sync_until(slurm_pool, lambda: state_of(request) == RequestState.RUNNING, what="the request running")
    cancel_request(request, user=member)
    sync_until(slurm_pool, lambda: SlurmJob.objects.get().ended_at is not None, what="the job ended")

    shown, error = check()

    assert error == "" and "ok: pool slurm job" in shown and "stopped by the portal" in shown, shown


@pytest.fixture
def partition_down(slurm_cluster):
    """Slurm keeps every job submitted to partition gpu pending until `up()` (and after the test)."""
    up = functools.partial(slurm, slurm_cluster, "scontrol", "update", "PartitionName=gpu", "State=UP")
    slurm(slurm_cluster, "scontrol", "update", "PartitionName=gpu", "State=DOWN")
    yield up
    up()


def test_a_run_slurm_held_pending_is_billed_from_slurms_start(
    slurm_pool, team_accounts, member, team, partition_down
):
    request = submit_request(
        user=member, team=team, pool_name="slurm", name="held", gpu_milli=250, command="sleep 2"
    )
    sync_until(
        slurm_pool, lambda: SlurmJob.objects.filter(request=request).exists(), what="the job submitted"
    )
    placed = Allocation.objects.get(request=request).started_at
    time.sleep(3)  # Slurm holds it pending: the partition is down
    sync_until(slurm_pool, lambda: True, what="a sync")
    assert state_of(request) == RequestState.SCHEDULED
    partition_down()

    sync_until(slurm_pool, lambda: state_of(request) == RequestState.SUCCEEDED, what="the run succeeded")

    segment = Allocation.objects.get(request=request)
    assert segment.started_at >= placed + dt.timedelta(seconds=2), (placed, segment.started_at)
    shown, error = check()
    assert error == "" and "1 ended run(s): 0 differ by more than 1 s." in shown, shown


def test_only_runs_ended_since_are_checked(finished_runs):
    later = (max(SlurmJob.objects.values_list("ended_at", flat=True)) + dt.timedelta(seconds=1)).isoformat()

    assert "0 ended run(s)" in check(since=later)[0]


def test_sacct_lines_give_each_jobs_elapsed_seconds():
    """With slurmdbd the record is sacct's (this cluster keeps no accounting: only its output's form)."""
    assert parse_sacct("41|5\n42|0\n43.batch|5\n\n") == {41: 5.0, 42: 0.0}
