"""Checkpoint, then move: checkpoint reports, the graceful stop path (preemption, reclaim, drain, move to
on-demand), requeue carrying the checkpoint with the work lost, and missed checkpoint intervals."""

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.choices import NoticeKind
from audit.models import Event, Notice
from billing_app.choices import ResizeState
from billing_app.models import CapacityMove, ResizeOffer
from billing_app.resizing import accept_resize
from billing_app.switching import switch_billing_mode
from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.models import Allocation, GpuRequest, TeamQuota
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.agents import record_checkpoint, report_finished, report_started
from scheduler_app.services.inventory import create_pool, issue_agent_credential, set_node_status
from scheduler_app.services.migration import check_checkpoints, expire_stops, reclaim_node
from scheduler_app.services.node_health import handle_node_loss
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request
from scheduler_app.services.transitions import stop_gracefully
from scheduler_app.tasks import migration_watchdog

AGENT = "/api/v1/agent/"
T0 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def spot_pool(db):
    return create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)


@pytest.fixture
def spot_node(make_node, spot_pool):
    return make_node("spot-1", gpus=2, pool=spot_pool)


def running_on(node, *, user, team, name="train", interval_s=600, gpu_index=0, fallback=False):
    """A spot request running on `node`'s card `gpu_index` since its placement (a half card)."""
    request = submit_request(
        user=user,
        team=team,
        name=name,
        gpu_milli=500,
        billing_mode=BillingMode.SPOT,
        checkpoint_interval_s=interval_s,
        allow_on_demand_fallback=fallback,
        command="python train.py",
    )
    allocate(request, [Slice(node.gpus.get(index=gpu_index).pk, 500, 1024)])
    report_started(node, request.pk)
    request.refresh_from_db()
    return request


def agent_for(node) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(node)}")
    return client


def events_of(request, to_state=None):
    events = Event.objects.filter(content_type__model="gpurequest", object_id=request.pk).order_by("id")
    return list(events.filter(to_state=to_state) if to_state else events)


# Checkpoint reports


def test_agent_reports_a_checkpoint_and_the_request_keeps_its_time_and_reference(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    at = timezone.now().replace(microsecond=0)

    response = agent_for(spot_node).post(
        AGENT + f"requests/{request.pk}/checkpointed/",
        {"at": at.isoformat(), "ref": "s3://ckpt/train/step-40"},
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert response.json()["last_checkpoint_at"].startswith(at.strftime("%Y-%m-%dT%H:%M:%S"))
    request.refresh_from_db()
    assert (request.last_checkpoint_at, request.checkpoint_ref) == (at, "s3://ckpt/train/step-40")
    assert events_of(request, "checkpoint")[0].data["ref"] == "s3://ckpt/train/step-40"


def test_a_repeated_or_older_checkpoint_report_changes_nothing(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    at = timezone.now()
    record_checkpoint(spot_node, request.pk, at)

    record_checkpoint(spot_node, request.pk, at)
    record_checkpoint(spot_node, request.pk, at - dt.timedelta(minutes=5))

    request.refresh_from_db()
    assert request.last_checkpoint_at == at
    assert len(events_of(request, "checkpoint")) == 1


def test_checkpoint_reports_in_the_future_or_for_another_nodes_work_are_refused(
    spot_node, make_node, spot_pool, member, team
):
    request = running_on(spot_node, user=member, team=team)
    other = make_node("spot-2", gpus=1, pool=spot_pool)

    future = agent_for(spot_node).post(
        AGENT + f"requests/{request.pk}/checkpointed/",
        {"at": (timezone.now() + dt.timedelta(hours=1)).isoformat()},
        format="json",
    )
    foreign = agent_for(other).post(
        AGENT + f"requests/{request.pk}/checkpointed/", {"at": timezone.now().isoformat()}, format="json"
    )

    assert future.status_code == 400
    assert "future" in " ".join(future.json()["error"]["fields"]["at"])
    assert foreign.status_code == 404
    request.refresh_from_db()
    assert request.last_checkpoint_at is None


def test_a_job_missing_its_interval_is_flagged_once_per_miss(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team, interval_s=600)
    started = request.allocations.get().started_at

    check_checkpoints(started + dt.timedelta(minutes=9))
    assert not Notice.objects.filter(kind=NoticeKind.CHECKPOINT_MISSED).exists()

    check_checkpoints(started + dt.timedelta(minutes=11))
    check_checkpoints(started + dt.timedelta(minutes=12))
    assert Notice.objects.filter(kind=NoticeKind.CHECKPOINT_MISSED).count() == 1
    assert len(events_of(request, NoticeKind.CHECKPOINT_MISSED)) == 1

    record_checkpoint(
        spot_node, request.pk, started + dt.timedelta(minutes=12), now=started + dt.timedelta(minutes=12)
    )
    check_checkpoints(started + dt.timedelta(minutes=13))
    assert Notice.objects.open().filter(kind=NoticeKind.CHECKPOINT_MISSED).count() == 0

    check_checkpoints(started + dt.timedelta(minutes=23))
    assert Notice.objects.filter(kind=NoticeKind.CHECKPOINT_MISSED).count() == 2


# The graceful stop path


def test_a_stopped_job_is_requeued_carrying_its_checkpoint_and_its_slice_closes_when_it_stopped(
    spot_node, member, team
):
    request = running_on(spot_node, user=member, team=team)
    checkpoint = timezone.now()
    record_checkpoint(spot_node, request.pk, checkpoint, ref="/shared/ckpt/train")
    deadline = timezone.now() + dt.timedelta(minutes=2)

    stop_gracefully([request.pk], deadline=deadline, reason="test stop")

    request.refresh_from_db()
    assert (request.state, request.stop_by) == (RequestState.MIGRATING, deadline)
    assert request.allocations.get().ended_at is None  # still running, still billed, until it stops
    work = agent_for(spot_node).get(AGENT + "work/").json()
    assert work[0]["stop_by"] is not None

    report_finished(spot_node, request.pk, -15)

    request.refresh_from_db()
    segment = request.allocations.get()
    assert request.state == RequestState.PENDING
    assert (request.checkpoint_ref, request.last_checkpoint_at) == ("/shared/ckpt/train", checkpoint)
    assert request.stop_by is None
    assert segment.ended_at is not None and segment.ended_at >= checkpoint
    requeued = events_of(request, RequestState.PENDING)[-1]
    assert requeued.data["work_lost_s"] == int((segment.ended_at - checkpoint).total_seconds())
    assert requeued.data["before_deadline"] is True
    assert "resumes from its checkpoint" in request.pending_reason
    assert agent_for(spot_node).get(AGENT + "work/").json() == []


def test_a_stop_past_its_deadline_is_requeued_at_the_deadline(spot_node, member, team, settings):
    settings.STOP_REPORT_SLACK_S = 10
    request = running_on(spot_node, user=member, team=team)
    deadline = timezone.now() + dt.timedelta(seconds=30)
    stop_gracefully([request.pk], deadline=deadline, reason="test stop")

    assert expire_stops(deadline + dt.timedelta(seconds=5)) == 0
    assert expire_stops(deadline + dt.timedelta(seconds=11)) == 1

    request.refresh_from_db()
    assert request.state == RequestState.PENDING
    assert request.allocations.get().ended_at == deadline
    lost = events_of(request, RequestState.PENDING)[-1].data["work_lost_s"]
    assert lost == int((deadline - request.allocations.get().started_at).total_seconds())


def test_a_second_stop_keeps_the_earlier_deadline(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    soon = timezone.now() + dt.timedelta(minutes=1)
    stop_gracefully([request.pk], deadline=soon, reason="first")

    stop_gracefully([request.pk], deadline=soon + dt.timedelta(minutes=5), reason="second")

    request.refresh_from_db()
    assert (request.stop_by, request.stop_reason) == (soon, "first")


def test_preemption_gives_a_running_victim_its_checkpoint_grace(
    make_node, pool, member, outsider, team, other_team
):
    make_node(gpus=1)
    TeamQuota.objects.create(team=team, pool=pool, guaranteed_milli=1000)
    borrower = submit_request(user=outsider, team=other_team, name="borrower", gpu_milli=1000)
    run_scheduling_pass()
    node = borrower.allocations.get().gpu.node
    report_started(node, borrower.pk)
    owner = submit_request(user=member, team=team, name="owner", gpu_milli=1000)

    first = run_scheduling_pass()

    borrower.refresh_from_db()
    owner.refresh_from_db()
    assert first.preempted == 1
    assert borrower.state == RequestState.MIGRATING and borrower.stop_by is not None
    assert borrower.allocations.get().ended_at is None
    assert owner.state == RequestState.PENDING
    assert "checkpoint and stop" in owner.pending_reason

    again = run_scheduling_pass()  # no second victim, no start on the card it still holds
    assert again.preempted == 0
    owner.refresh_from_db()
    assert owner.state == RequestState.PENDING

    report_finished(node, borrower.pk, -15)
    run_scheduling_pass()

    borrower.refresh_from_db()
    owner.refresh_from_db()
    assert borrower.state == RequestState.PENDING
    assert owner.state == RequestState.SCHEDULED


# Reclaim notices


def test_reclaim_marks_the_node_and_sends_its_work_down_the_graceful_path(spot_node, member, team):
    first = running_on(spot_node, user=member, team=team, name="a", gpu_index=0)
    second = running_on(spot_node, user=member, team=team, name="b", gpu_index=1)
    deadline = timezone.now() + dt.timedelta(minutes=2)

    assert reclaim_node(spot_node, deadline=deadline, source="aws", notice_id="i-1") == 2

    spot_node.refresh_from_db()
    assert spot_node.status == NodeStatus.RECLAIMED
    for request in (first, second):
        request.refresh_from_db()
        assert (request.state, request.stop_by) == (RequestState.MIGRATING, deadline)
        assert "reclaimed (aws, notice i-1)" in request.stop_reason


def test_the_same_reclaim_notice_twice_changes_nothing_the_second_time(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    deadline = timezone.now() + dt.timedelta(minutes=2)
    reclaim_node(spot_node, deadline=deadline, source="gcp", notice_id="n-7")
    events = Event.objects.count()

    assert reclaim_node(spot_node, deadline=deadline, source="gcp", notice_id="n-7") == 0

    assert Event.objects.count() == events
    request.refresh_from_db()
    assert request.stop_by == deadline


def test_an_on_demand_node_cannot_be_reclaimed(make_node, member, team):
    node = make_node(gpus=1)

    with pytest.raises(Exception, match="drain it instead"):
        reclaim_node(node, deadline=timezone.now(), source="operator")

    node.refresh_from_db()
    assert node.status == NodeStatus.READY


def test_the_cloud_watcher_reports_a_reclaim_notice_through_the_agent_endpoint(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    deadline = (timezone.now() + dt.timedelta(minutes=2)).replace(microsecond=0)
    body = {"deadline": deadline.isoformat(), "source": "azure", "notice_id": "evt-1"}

    first = agent_for(spot_node).post(AGENT + "reclaim-notice/", body, format="json")
    second = agent_for(spot_node).post(AGENT + "reclaim-notice/", body, format="json")

    assert first.status_code == 200, first.json()
    assert first.json() == {"node": "spot-1", "node_status": "reclaimed", "stopping": 1}
    assert second.json()["stopping"] == 0
    request.refresh_from_db()
    assert request.stop_by == deadline


def test_only_operators_reclaim_a_node_through_the_api(spot_node, member, operator, team):
    request = running_on(spot_node, user=member, team=team)
    as_member, as_operator = APIClient(), APIClient()
    as_member.force_authenticate(member)
    as_operator.force_authenticate(operator)

    refused = as_member.post(f"/api/v1/nodes/{spot_node.pk}/reclaim/", {"grace_s": 60}, format="json")
    assert refused.status_code == 403
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING

    done = as_operator.post(f"/api/v1/nodes/{spot_node.pk}/reclaim/", {"grace_s": 60}, format="json")

    assert done.status_code == 200, done.json()
    assert done.json()["status"] == NodeStatus.RECLAIMED
    request.refresh_from_db()
    assert request.state == RequestState.MIGRATING
    assert 55 <= (request.stop_by - timezone.now()).total_seconds() <= 60


def test_a_reclaim_with_both_a_deadline_and_a_grace_period_is_refused(spot_node, operator):
    client = APIClient()
    client.force_authenticate(operator)

    response = client.post(
        f"/api/v1/nodes/{spot_node.pk}/reclaim/",
        {"grace_s": 60, "deadline": timezone.now().isoformat()},
        format="json",
    )

    assert response.status_code == 400
    assert "grace_s" in response.json()["error"]["fields"]
    spot_node.refresh_from_db()
    assert spot_node.status == NodeStatus.READY


# Migration targets


def test_a_reclaimed_job_that_allows_fallback_moves_to_on_demand_capacity_billed_on_demand(
    spot_node, make_node, member, team
):
    on_demand = make_node("od-1", gpus=1)
    request = running_on(spot_node, user=member, team=team, fallback=True)
    reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    report_finished(spot_node, request.pk, 0)

    run_scheduling_pass()

    request.refresh_from_db()
    spot_segment, od_segment = request.allocations.order_by("started_at", "pk")
    assert request.state == RequestState.SCHEDULED
    assert (spot_segment.billing_mode, spot_segment.ended_at is not None) == (BillingMode.SPOT, True)
    assert (od_segment.gpu.node, od_segment.billing_mode) == (on_demand, BillingMode.ON_DEMAND)
    assert od_segment.started_at >= spot_segment.ended_at


def test_a_reclaimed_job_without_fallback_waits_for_spot_with_a_clear_reason(
    spot_node, make_node, member, team
):
    make_node("od-1", gpus=1)
    request = running_on(spot_node, user=member, team=team, fallback=False)
    reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    report_finished(spot_node, request.pk, 0)

    run_scheduling_pass()

    request.refresh_from_db()
    assert request.state == RequestState.PENDING
    assert "spot" in request.pending_reason
    assert not Allocation.objects.committed().filter(request=request).exists()


def test_work_on_a_draining_node_moves_at_its_next_checkpoint(spot_node, member, team, settings):
    settings.MOVE_AT_CHECKPOINT_GRACE_S = 60
    request = running_on(spot_node, user=member, team=team)
    set_node_status(spot_node, NodeStatus.DRAINING, reason="maintenance")
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING  # draining stops nothing by itself

    now = timezone.now()
    record_checkpoint(spot_node, request.pk, now, now=now)

    request.refresh_from_db()
    assert request.state == RequestState.MIGRATING
    assert request.stop_by == now + dt.timedelta(seconds=60)
    assert "draining" in request.stop_reason


def test_work_on_a_draining_node_moves_at_its_intervals_end_without_a_checkpoint(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team, interval_s=600)
    set_node_status(spot_node, NodeStatus.DRAINING, reason="maintenance")
    started = request.allocations.get().started_at

    check_checkpoints(started + dt.timedelta(minutes=5))
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING

    check_checkpoints(started + dt.timedelta(minutes=11))
    request.refresh_from_db()
    assert request.state == RequestState.MIGRATING


def test_a_move_to_on_demand_is_applied_at_the_next_checkpoint(spot_node, make_node, member, team):
    on_demand = make_node("od-1", gpus=1)
    request = running_on(spot_node, user=member, team=team)
    switch_billing_mode(request, BillingMode.ON_DEMAND, user=member)
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING

    record_checkpoint(spot_node, request.pk, timezone.now())
    report_finished(spot_node, request.pk, 0)
    run_scheduling_pass()

    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
    segment = Allocation.objects.committed().get(request=request)
    assert (segment.gpu.node, segment.billing_mode) == (on_demand, BillingMode.ON_DEMAND)
    assert CapacityMove.objects.get(request=request).done_at is not None


def test_a_lost_node_requeues_its_work_carrying_the_checkpoint_and_the_work_lost(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    checkpoint = timezone.now()
    record_checkpoint(spot_node, request.pk, checkpoint, ref="/shared/ckpt/x")

    handle_node_loss(spot_node, reason="no heartbeat")

    request.refresh_from_db()
    assert (request.state, request.checkpoint_ref) == (RequestState.PENDING, "/shared/ckpt/x")
    event = events_of(request, RequestState.PENDING)[-1]
    assert event.data["checkpoint_ref"] == "/shared/ckpt/x"
    assert event.data["work_lost_s"] >= 0
    assert GpuRequest.objects.get(pk=request.pk).last_checkpoint_at == checkpoint


# Fencing


def test_reports_of_an_earlier_run_do_not_touch_the_run_placed_since(
    spot_node, make_node, spot_pool, member, team
):
    request = running_on(spot_node, user=member, team=team)
    assert request.placements == 1
    handle_node_loss(spot_node, reason="no heartbeat")
    elsewhere = make_node("spot-2", gpus=1, pool=spot_pool)
    request.refresh_from_db()
    allocate(request, [Slice(elsewhere.gpus.get().pk, 500, 1024)])
    request.refresh_from_db()
    assert (request.state, request.placements) == (RequestState.SCHEDULED, 2)

    # The lost node comes back and reports its stale process: started, checkpointed, finished.
    report_started(spot_node, request.pk, generation=1)
    with pytest.raises(Exception, match="no longer runs"):
        record_checkpoint(spot_node, request.pk, timezone.now(), generation=1)
    report_finished(spot_node, request.pk, 0, generation=1)

    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
    assert request.last_checkpoint_at is None
    assert report_started(elsewhere, request.pk, generation=2).state == RequestState.RUNNING


def test_a_stale_finished_from_the_same_node_does_not_end_the_new_run_there(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team, gpu_index=0)
    stop_gracefully([request.pk], deadline=timezone.now(), reason="moved")
    report_finished(spot_node, request.pk, -15, generation=1)
    request.refresh_from_db()
    allocate(request, [Slice(spot_node.gpus.get(index=1).pk, 500, 1024)])
    report_started(spot_node, request.pk, generation=2)

    report_finished(spot_node, request.pk, 0, generation=1)  # sent again late, from the first run

    request.refresh_from_db()
    assert (request.state, request.placements) == (RequestState.RUNNING, 2)
    report_finished(spot_node, request.pk, 0, generation=2)
    request.refresh_from_db()
    assert request.state == RequestState.SUCCEEDED


def test_an_accepted_resize_is_applied_at_the_next_checkpoint(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    offer = ResizeOffer.objects.create(
        request=request,
        from_milli=500,
        to_milli=250,
        busy_percent=20,
        slowdown_percent=5,
        saving_percent=45,
        reason="It keeps a quarter card busy.",
        offered_at=timezone.now(),
    )
    accept_resize(offer, user=member)
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING  # nothing moves before the checkpoint

    record_checkpoint(spot_node, request.pk, timezone.now())
    request.refresh_from_db()
    assert request.state == RequestState.MIGRATING and "resized to 250" in request.stop_reason
    report_finished(spot_node, request.pk, -15)
    run_scheduling_pass()

    request.refresh_from_db()
    offer.refresh_from_db()
    assert (request.state, request.gpu_milli) == (RequestState.SCHEDULED, 250)
    assert Allocation.objects.committed().get(request=request).milli == 250
    assert offer.state == ResizeState.APPLIED


# The watchdog as Celery runs it


def test_beat_schedules_the_migration_watchdog_and_the_task_requeues_expired_stops(
    spot_node, member, team, settings
):
    entry = settings.CELERY_BEAT_SCHEDULE["migration-watchdog"]
    assert entry == {"task": migration_watchdog.name, "schedule": float(settings.SCHEDULER_INTERVAL_S)}
    settings.STOP_REPORT_SLACK_S = 0
    request = running_on(spot_node, user=member, team=team)
    stop_gracefully([request.pk], deadline=timezone.now() - dt.timedelta(seconds=1), reason="gone")

    assert migration_watchdog() == {"expired": 1, "missed": 0, "moving": 0}

    request.refresh_from_db()
    assert request.state == RequestState.PENDING


def test_work_released_while_it_is_being_moved_ends_released_and_is_not_requeued(spot_node, member, team):
    request = running_on(spot_node, user=member, team=team)
    stop_gracefully([request.pk], deadline=timezone.now() + dt.timedelta(minutes=2), reason="reclaimed")

    release_request(request, user=member)
    report_finished(spot_node, request.pk, -15)  # its agent stopped it meanwhile

    request.refresh_from_db()
    assert (request.state, request.stop_by) == (RequestState.RELEASED, None)
    assert request.allocations.get().ended_at is not None
