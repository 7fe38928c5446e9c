"""Fault: the agent process is killed with SIGKILL while its job runs (its job, in a session of its
own, keeps running). The node goes suspect, then lost, and its work is requeued elsewhere; the agent
that comes back must not leave the old job running next to the moved one."""

import datetime as dt
import os
import signal

from django.conf import settings
from django.utils import timezone

from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.node_health import check_heartbeats
from tests.faults.conftest import running_here, settle_and_check
from tests.waiting import wait_until, wait_until_steady


def test_a_sigkilled_agent_comes_back_without_running_the_moved_work_twice(
    agent_process, start_agent, place, make_node, node
):
    spare = make_node("node-2", gpus=1)
    request = place("sleep 120")  # no output: nothing kills it when its agent dies
    first = agent_process(node)
    wait_until(lambda: request.pk in running_here(), what="the job running on node-1")

    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert request.pk in running_here()  # the job outlives its agent
    # A report the agent sent just before it died may still be in the live server's hands (it marks
    # the node heard, ready again): the watchdog is to judge the silence after it.
    wait_until_steady(lambda: _heard_at(node), quiet_s=0.5, what="the last report handled")
    silent_since = timezone.now() + dt.timedelta(seconds=settings.NODE_SUSPECT_AFTER_S + 1)
    assert check_heartbeats(silent_since) == {"suspect": 1, "lost": 0}
    later = silent_since + dt.timedelta(seconds=settings.NODE_LOST_AFTER_S + 1)
    assert check_heartbeats(later) == {"suspect": 0, "lost": 1}
    request.refresh_from_db()
    assert request.state == RequestState.PENDING
    run_scheduling_pass()
    spare_agent = start_agent(for_node=spare)

    def moved_and_running():
        spare_agent.round()
        return request.pk in spare_agent.jobs

    wait_until(moved_and_running, what="the job started on node-2")
    agent_process(node)  # node-1's agent is restarted: the old job must go
    wait_until(lambda: len(running_here().get(request.pk, ())) == 1, what="one run of the job left")

    node.refresh_from_db()
    assert node.status == NodeStatus.LOST
    spare_agent.round()
    assert request.pk in spare_agent.jobs
    settle_and_check()


def test_an_agent_restarted_before_its_node_is_lost_runs_the_job_once(agent_process, place, node):
    request = place("sleep 120")  # no output: nothing kills it when its agent dies
    first = agent_process(node)
    wait_until(lambda: request.pk in running_here(), what="the job running")
    before = running_here()[request.pk]

    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    agent_process(node)
    wait_until(lambda: running_here().get(request.pk, before) != before, what="the job restarted")

    assert len(running_here()[request.pk]) == 1
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING
    settle_and_check()


def _heard_at(node) -> dt.datetime:
    node.refresh_from_db(fields=["last_heartbeat_at"])
    return node.last_heartbeat_at
