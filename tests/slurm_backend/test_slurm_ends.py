"""How a Slurm job ends, against the real daemons: killed at its time limit, stopped with a grace for a
move (TERM first, which the job may trap). Each ends in its state with its
reason; the invariants are checked after each test (tests/conftest.py)."""

import datetime as dt

from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.services.transitions import stop_gracefully
from slurm_backend.models import SlurmJob
from tests.slurm_backend.conftest import (
    log_of,
    run_until_ended,
    run_until_running,
    state_of,
    submit,
    sync_until,
)


def last_reason(request) -> str:
    return Event.objects.filter(object_id=request.pk, to_state=request.state).latest("pk").reason


def test_a_job_past_its_time_limit_is_killed_by_slurm_and_fails_saying_so(
    slurm_pool, team_accounts, member, team
):
    # Slurm's limit is in whole minutes: one.
    request = submit(member, team, "overtime", "sleep 600", gpu_milli=125, max_duration_s=60)

    sync_until(
        slurm_pool, lambda: state_of(request) == RequestState.FAILED, what="the job timed out", timeout_s=200
    )

    assert SlurmJob.objects.get(request=request).state == "TIMEOUT"
    assert last_reason(request) == "killed at its time limit of 1 min"
    assert request.allocations.filter(ended_at__isnull=True).count() == 0


def test_a_move_sends_term_first_and_the_job_that_traps_it_is_requeued(
    slurm_pool, team_accounts, member, team
):
    trapping = "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 1; done"
    request = submit(member, team, "trapper", trapping)
    job = run_until_running(slurm_pool, request)
    sync_until(slurm_pool, lambda: "ready" in log_of(request), what="the job's trap set")

    stop_gracefully(
        [request.pk],
        deadline=timezone.now() + dt.timedelta(seconds=60),
        reason="preempted by a higher priority request",
        actor_name="scheduler",
    )
    sync_until(slurm_pool, lambda: "got TERM" in log_of(request), what="the job seeing TERM")
    first = run_until_ended(slurm_pool, job)

    assert first.kill_sent_at is None  # it stopped on TERM, within its grace
    moved = Event.objects.filter(object_id=request.pk, from_state=RequestState.MIGRATING).latest("pk")
    assert moved.to_state == RequestState.PENDING
    assert "preempted by a higher priority request" in moved.reason
    assert state_of(request) in (RequestState.PENDING, RequestState.SCHEDULED, RequestState.RUNNING)


def test_a_job_that_ignores_term_is_killed_at_the_end_of_its_grace_and_requeued(
    slurm_pool, team_accounts, member, team
):
    stubborn = "trap 'echo ignoring TERM' TERM; echo ready; while true; do sleep 1; done"
    request = submit(member, team, "stubborn", stubborn)
    job = run_until_running(slurm_pool, request)
    sync_until(slurm_pool, lambda: "ready" in log_of(request), what="the job's trap set")

    deadline = timezone.now() + dt.timedelta(seconds=3)
    stop_gracefully([request.pk], deadline=deadline, reason="preempted by a higher priority request")
    sync_until(slurm_pool, lambda: "ignoring TERM" in log_of(request), what="the job seeing TERM")
    ended = run_until_ended(slurm_pool, job)

    assert ended.stop_sent_at is not None and ended.kill_sent_at is not None
    assert ended.kill_sent_at >= deadline  # SIGKILL only once its grace was over
    moved = Event.objects.filter(object_id=request.pk, from_state=RequestState.MIGRATING).latest("pk")
    assert moved.to_state == RequestState.PENDING
    assert "preempted by a higher priority request" in moved.reason
