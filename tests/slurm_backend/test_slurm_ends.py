"""How a Slurm job ends, against the real daemons: killed at its time limit, released by its user,
stopped with a grace for a move (TERM first, which the job may trap). Each ends in its state with its
reason; the invariants are checked after each test (tests/conftest.py)."""

import datetime as dt

from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.services.requests import release_request, submit_request
from scheduler_app.services.transitions import stop_gracefully
from slurm_backend.models import SlurmJob
from tests.slurm_backend.conftest import slurm, sync_until
from tests.slurm_backend.test_slurm_pool import log_of, state_of


def last_reason(request) -> str:
    return Event.objects.filter(object_id=request.pk, to_state=request.state).latest("pk").reason


def test_a_job_past_its_time_limit_is_killed_by_slurm_and_fails_saying_so(
    slurm_pool, team_accounts, member, team
):
    request = submit_request(
        user=member,
        team=team,
        pool_name="slurm",
        name="overtime",
        gpu_milli=125,
        max_duration_s=60,  # Slurm's limit is in whole minutes: one
        command="sleep 600",
    )

    sync_until(
        slurm_pool, lambda: state_of(request) == RequestState.FAILED, what="the job timed out", timeout_s=200
    )

    assert SlurmJob.objects.get(request=request).state == "TIMEOUT"
    assert last_reason(request) == "killed at its time limit of 1 min"
    assert request.allocations.filter(ended_at__isnull=True).count() == 0


def test_a_release_cancels_the_slurm_job_and_the_request_ends_released(
    slurm_pool, slurm_cluster, team_accounts, member, team
):
    request = submit_request(
        user=member, team=team, pool_name="slurm", name="done", gpu_milli=250, command="sleep 300"
    )
    sync_until(slurm_pool, lambda: state_of(request) == RequestState.RUNNING, what="the request running")
    job = SlurmJob.objects.get(request=request)

    release_request(request, user=member)
    sync_until(slurm_pool, lambda: SlurmJob.objects.get(pk=job.pk).ended_at is not None, what="the job ended")

    assert slurm(slurm_cluster, "squeue", "-h", "-j", str(job.job_id)).strip() == ""
    assert state_of(request) == RequestState.RELEASED
    assert last_reason(request) == "released by user"


def test_a_move_sends_term_first_and_the_job_that_traps_it_is_requeued(
    slurm_pool, team_accounts, member, team
):
    request = submit_request(
        user=member,
        team=team,
        pool_name="slurm",
        name="trapper",
        gpu_milli=250,
        command="trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 1; done",
    )
    sync_until(
        slurm_pool,
        lambda: state_of(request) == RequestState.RUNNING and "ready" in log_of(request),
        what="the job running and its trap set",
    )

    stop_gracefully(
        [request.pk],
        deadline=timezone.now() + dt.timedelta(seconds=60),
        reason="preempted by a higher priority request",
        actor_name="scheduler",
    )
    sync_until(slurm_pool, lambda: "got TERM" in log_of(request), what="the job seeing TERM")
    sync_until(
        slurm_pool,
        lambda: SlurmJob.objects.get(request=request, generation=1).ended_at is not None,
        what="the first run ended",
    )

    first = SlurmJob.objects.get(request=request, generation=1)
    assert first.kill_sent_at is None  # it stopped on TERM, within its grace
    moved = Event.objects.filter(object_id=request.pk, from_state=RequestState.MIGRATING).latest("pk")
    assert moved.to_state == RequestState.PENDING
    assert "preempted by a higher priority request" in moved.reason
    assert state_of(request) in (RequestState.PENDING, RequestState.SCHEDULED, RequestState.RUNNING)
