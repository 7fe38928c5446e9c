"""Faults: half of the spot nodes reclaimed at once while requests keep arriving, and the same reclaim
notice delivered twice (by the node's agent, then by the fault-injection command). Real agents (in
this process, against the live portal) run real demo jobs that checkpoint; each moved job must stop
before its node's deadline and resume elsewhere from its checkpoint, and every after-fault rule holds."""

import datetime as dt
import io
import threading

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.models import Allocation, GpuRequest, LogChunk
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.rules.invariants import unresumed_moves
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.migration import watch_migrations
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from teams.services import create_api_token
from tests.agent_fixtures import DEMO_JOB
from tests.faults.conftest import settle_and_check
from tests.portal.test_production_mode import call
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres

SPOT_NODES = 6
GRACE_S = 20
WORK = f"{DEMO_JOB} --seconds 600 --checkpoint-every 0.5"


@pytest.fixture
def spot_cluster(make_node, start_agent):
    """SPOT_NODES spot nodes of one card, each with its agent."""
    pool = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    nodes = [make_node(f"spot-{i}", gpus=1, pool=pool) for i in range(SPOT_NODES)]
    return {node.pk: (node, start_agent(for_node=node)) for node in nodes}


def _working(member, team, nodes) -> list[GpuRequest]:
    """One checkpointing spot job placed on each of `nodes`."""
    jobs = []
    for node in nodes:
        request = submit_request(
            user=member, team=team, name=f"train-{node.name}", gpu_milli=500, command=WORK,
            billing_mode=BillingMode.SPOT, checkpoint_interval_s=600,
        )  # fmt: skip
        allocate(request, [Slice(node.gpus.get().pk, 500, 20480)])
        jobs.append(request)
    return jobs


def _round(cluster) -> None:
    for _, agent in cluster.values():
        agent.round()
    watch_migrations()
    run_scheduling_pass()


def _checkpointed(cluster, jobs) -> None:
    def all_checkpointed():
        _round(cluster)
        saved = GpuRequest.objects.filter(pk__in=[j.pk for j in jobs], last_checkpoint_at__isnull=False)
        return saved.count() == len(jobs)

    wait_until(all_checkpointed, what="every job running and checkpointed")


def _resumed_elsewhere(cluster, jobs, away) -> None:
    def moved_and_running():
        _round(cluster)
        ids = [j.pk for j in jobs]
        running = GpuRequest.objects.filter(pk__in=ids, state=RequestState.RUNNING).count()
        return running == len(jobs) and not (
            Allocation.objects.committed().filter(request_id__in=ids, gpu__node__in=away).exists()
        )

    wait_until(moved_and_running, timeout_s=60, what="every reclaimed job running on another node")


def _assert_each_move_kept_its_deadline_and_checkpoint(jobs) -> None:
    for job in jobs:
        [move] = Event.objects.filter(
            object_id=job.pk, to_state=RequestState.PENDING, data__has_key="stop_by"
        )
        assert move.data["before_deadline"] is True, move.data
        assert move.data["checkpoint_at"], move.data  # it had checkpointed: the new run starts from there
        started = Event.objects.filter(object_id=job.pk, to_state=RequestState.RUNNING).last()
        assert started.data["resumed_from"] >= move.data["checkpoint_at"], (started.data, move.data)
        log = "".join(LogChunk.objects.filter(request=job).order_by("pk").values_list("text", flat=True))
        assert "resumed from step " in log and "resumed from step 0" not in log, log[-500:]
    assert unresumed_moves() == []


def test_half_of_the_spot_nodes_reclaimed_at_once_while_requests_arrive(
    spot_cluster, member, team, live_server
):
    nodes = [node for node, _ in spot_cluster.values()]
    reclaimed = nodes[: SPOT_NODES // 2]
    jobs = _working(member, team, reclaimed)
    _checkpointed(spot_cluster, jobs)
    _, token = create_api_token(member, name="load", expires_at=timezone.now() + dt.timedelta(hours=1))
    deadline = timezone.now() + dt.timedelta(seconds=GRACE_S)
    answers = []

    def submit():
        for n in range(6):
            body = {
                "name": f"arrival-{n}", "gpu_milli": 250, "command": "sleep 60", "billing_mode": "spot",
                "checkpoint_interval_s": 600,
            }  # fmt: skip
            answers.append(call(live_server.url, "/api/v1/requests/", token, body))

    def notice(node):
        spot_cluster[node.pk][1].client.reclaim_notice(deadline, "aws", f"i-{node.name}")

    threads = [threading.Thread(target=submit)] + [
        threading.Thread(target=notice, args=(n,)) for n in reclaimed
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [status for status, _ in answers] == [201] * 6, answers
    for node in reclaimed:
        node.refresh_from_db()
        assert node.status == NodeStatus.RECLAIMED and node.reclaim_deadline == deadline
    _resumed_elsewhere(spot_cluster, jobs, reclaimed)
    assert timezone.now() < deadline  # every move was done before the deadline, not at it
    _assert_each_move_kept_its_deadline_and_checkpoint(jobs)
    accepted = [body["id"] for _, body in answers] + [j.pk for j in jobs]
    settle_and_check(accepted=accepted)


def test_the_same_reclaim_notice_twice_changes_nothing_the_second_time(spot_cluster, member, team):
    node, agent = next(iter(spot_cluster.values()))
    [job] = _working(member, team, [node])
    _checkpointed(spot_cluster, [job])
    agent.client.reclaim_notice(timezone.now() + dt.timedelta(seconds=GRACE_S), "aws", "i-0123")
    node.refresh_from_db()
    job.refresh_from_db()
    events = Event.objects.count()
    assert node.status == NodeStatus.RECLAIMED and job.state == RequestState.MIGRATING

    out = io.StringIO()
    call_command("inject_fault", "reclaim", node.name, "--grace", "60", "--notice-id", "i-0123", stdout=out)

    assert "0 job(s) stop by" in out.getvalue()
    assert Event.objects.count() == events
    again = type(node).objects.get(pk=node.pk)
    assert (again.status, again.reclaim_deadline, again.reclaim_notice_id) == (
        node.status, node.reclaim_deadline, "i-0123",
    )  # fmt: skip
    moving = GpuRequest.objects.get(pk=job.pk)
    assert (moving.state, moving.stop_by) == (job.state, job.stop_by)
    _resumed_elsewhere(spot_cluster, [job], [node])
    _assert_each_move_kept_its_deadline_and_checkpoint([job])
    settle_and_check(accepted=[job.pk])
