"""The agent's side of "checkpoint, then move", live against the portal: it reports the job's checkpoints,
stops it by the deadline of a reclaim with the time left, and the job resumes from its checkpoint."""

import datetime as dt
import shutil

from django.utils import timezone
from gpu_portal_sdk.errors import ConnectionFailedError

from agent.checkpoint_sync import CheckpointSync, FilesystemStore
from agent.cloud_notices import ReclaimNotice
from audit.models import Event
from scheduler_app.choices import CapacityType
from scheduler_app.rules.invariants import unresumed_moves, violations
from scheduler_app.selectors import request_log
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.transitions import requeue, stop_gracefully
from tests.agent_fixtures import DEMO_JOB, rounds_until


def refreshed(request):
    request.refresh_from_db()
    return request


def test_the_agent_reports_checkpoints_as_the_job_touches_its_marker(start_agent, place):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 30 --checkpoint-every 0.5")

    rounds_until(agent, lambda: refreshed(request).last_checkpoint_at is not None, what="a checkpoint")

    assert request.checkpoint_ref.endswith(f"request-{request.pk}")
    assert (timezone.now() - request.last_checkpoint_at).total_seconds() < 30


def test_a_reclaimed_job_checkpoints_stops_by_the_deadline_is_requeued_and_resumes(
    start_agent, place, make_node
):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    spot_node = make_node("spot-1", gpus=1, pool=spot)
    agent = start_agent(for_node=spot_node)
    request = place(f"{DEMO_JOB} --seconds 60 --checkpoint-every 0", on=spot_node)
    rounds_until(agent, lambda: refreshed(request).state == "running", what="running")
    rounds_until(agent, lambda: "step 4:" in request_log(request).text, what="some steps")
    deadline = timezone.now() + dt.timedelta(seconds=20)

    reclaim_node(spot_node, deadline=deadline, source="test", notice_id="n-1")
    rounds_until(agent, lambda: refreshed(request).state == "pending", what="requeued")

    assert request.last_checkpoint_at is not None  # written on SIGTERM, reported before the exit
    assert timezone.now() < deadline  # it stopped in its grace, not at the SIGKILL
    assert "SIGTERM received" in request_log(request).text
    segment = request.allocations.get()
    assert segment.ended_at is not None

    again = make_node("spot-2", gpus=1, pool=spot)
    allocate(request, [Slice(again.gpus.get().pk, 250, 20480)])
    resumed = start_agent(for_node=again)
    rounds_until(resumed, lambda: "starting at step" in request_log(request).text.split("SIGTERM")[-1])
    assert "starting at step 0" not in request_log(request).text.split("SIGTERM")[-1]


def test_a_node_that_comes_back_stops_its_stale_run_before_the_new_one_starts(start_agent, place, node):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 60", card=0)
    rounds_until(agent, lambda: refreshed(request).state == "running", what="running")
    stale = agent.jobs[request.pk]

    # Meanwhile the portal lost the node, requeued the work and placed it again here, on the other card.
    requeue([request.pk], reason="node lost")
    allocate(refreshed(request), [Slice(node.gpus.get(index=1).pk, 250, 20480)])
    rounds_until(agent, lambda: refreshed(request).state == "running", what="the new run")

    assert stale.finished()  # the old process was stopped first
    fresh = agent.jobs[request.pk]
    assert fresh is not stale and fresh.generation == 2 == request.placements
    assert [piece.uuid for piece in fresh.slices] == ["GPU-node-1-1"]


def test_a_job_left_behind_mid_move_by_a_replaced_agent_is_requeued_at_once_from_its_sigterm_checkpoint(
    start_agent, place, make_node
):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    spot_node = make_node("spot-1", gpus=1, pool=spot)
    gone = start_agent(for_node=spot_node)
    request = place(f"{DEMO_JOB} --seconds 60 --checkpoint-every 0", on=spot_node)
    rounds_until(gone, lambda: refreshed(request).state == "running", what="running")
    rounds_until(gone, lambda: "step 4:" in request_log(request).text, what="some steps")
    deadline = timezone.now() + dt.timedelta(seconds=60)
    reclaim_node(spot_node, deadline=deadline, source="test", notice_id="n-1")
    assert refreshed(request).state == "migrating"
    before = request.last_checkpoint_at

    # The agent dies before it hears of the move (its job runs on); another takes the node over.
    replacement = start_agent(for_node=spot_node)
    rounds_until(replacement, lambda: refreshed(request).state == "pending", what="requeued", timeout_s=20)

    assert gone.jobs[request.pk].process.poll() is not None  # the old run was stopped
    assert request.last_checkpoint_at > before  # its SIGTERM checkpoint, reported by the new agent
    assert timezone.now() < deadline - dt.timedelta(seconds=30)  # not left waiting for the deadline
    assert request.allocations.get().ended_at is not None
    assert request.exit_code is None  # stopped to move, not failed
    assert violations() == [] and unresumed_moves() == []


def test_an_agent_cut_off_from_the_portal_fences_its_jobs_and_runs_them_again_when_it_answers(
    start_agent, place, monkeypatch
):
    agent = start_agent(fence_after_s=3.0, grace_s=5.0)  # far above a round, even on a busy machine
    request = place(f"{DEMO_JOB} --seconds 60 --checkpoint-every 0.5")
    rounds_until(agent, lambda: refreshed(request).state == "running", what="running")
    rounds_until(agent, lambda: refreshed(request).last_checkpoint_at is not None, what="a checkpoint")
    first = agent.jobs[request.pk]
    work = agent.client.work

    def unreachable():
        raise ConnectionFailedError("the portal is unreachable")

    monkeypatch.setattr(agent.client, "work", unreachable)
    rounds_until(agent, first.finished, what="the job fenced")
    assert refreshed(request).state == "running"  # no exit reported: the portal decides

    monkeypatch.setattr(agent.client, "work", work)
    rounds_until(
        agent, lambda: request.pk in agent.jobs and agent.jobs[request.pk] is not first, what="restart"
    )
    rounds_until(agent, lambda: request_log(request).text.count("starting at step") == 2, what="resumed")
    assert "starting at step 0" not in request_log(request).text.split("SIGTERM")[-1]
    assert refreshed(request).state == "running"


class OneNotice:
    """A cloud watcher that always sees the same reclaim notice."""

    def __init__(self, deadline):
        self.notice = ReclaimNotice("aws", deadline, "i-0abc:terminate")

    def check(self):
        return self.notice


def test_the_clouds_reclaim_notice_reaches_the_portal_once_and_the_job_moves(start_agent, place, make_node):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    spot_node = make_node("spot-1", gpus=1, pool=spot)
    deadline = timezone.now() + dt.timedelta(seconds=30)
    agent = start_agent(for_node=spot_node, cloud_notices=OneNotice(deadline))
    request = place(f"{DEMO_JOB} --seconds 60", on=spot_node)

    rounds_until(agent, lambda: refreshed(request).state == "pending", what="moved off the node")

    spot_node.refresh_from_db()
    assert (spot_node.status, spot_node.reclaim_notice_id) == ("reclaimed", "i-0abc:terminate")
    assert spot_node.reclaim_deadline == deadline
    reclaims = Event.objects.filter(content_type__model="node", object_id=spot_node.pk, to_state="reclaimed")
    assert reclaims.count() == 1


def test_with_a_checkpoint_store_the_job_resumes_on_another_node_from_the_stored_copy(
    start_agent, place, make_node, tmp_path, settings
):
    (tmp_path / "store").mkdir()  # the mounted store
    sync = CheckpointSync(FilesystemStore(tmp_path / "store"))
    agent = start_agent(checkpoint_sync=sync)
    request = place(f"{DEMO_JOB} --seconds 60 --checkpoint-every 0.5")
    rounds_until(agent, lambda: "step 4:" in request_log(request).text, what="some steps")
    rounds_until(agent, lambda: refreshed(request).checkpoint_ref.startswith("file:"), what="a stored copy")
    stop_gracefully([request.pk], deadline=timezone.now() + dt.timedelta(seconds=20), reason="test move")
    rounds_until(agent, lambda: refreshed(request).state == "pending", what="requeued")
    shutil.rmtree(
        f"{settings.CHECKPOINT_ROOT}/{request.team.slug}/request-{request.pk}"
    )  # not on shared storage

    other = make_node("node-9", gpus=1)
    allocate(refreshed(request), [Slice(other.gpus.get().pk, 250, 20480)])
    resumed = start_agent(for_node=other, checkpoint_sync=sync)
    rounds_until(resumed, lambda: "resumed from step" in request_log(request).text, what="resumed")
