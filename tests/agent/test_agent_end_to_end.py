"""The agent on simulated NVML against the live portal: register, heartbeat, run, log, exit status,
stop with grace, the memory watchdog."""

import datetime as dt
import threading
import time

from django.utils import timezone

from audit.models import Event
from scheduler_app.models import Gpu
from scheduler_app.selectors import request_log
from scheduler_app.services.requests import release_request
from telemetry.models import AllocationSample, GpuSample, NodeSample
from tests.agent_fixtures import DEMO_JOB, rounds_until
from tests.waiting import wait_until


def state_of(request) -> str:
    request.refresh_from_db()
    return request.state


def log_of(request) -> str:
    return request_log(request).text


def test_the_agent_registers_the_nodes_cards_and_heartbeats_with_samples(start_agent, node):
    agent = start_agent()
    Gpu.objects.filter(node=node).update(mig_capable=True, mig_enabled=True)

    agent.round()
    agent.round()

    assert agent.registered
    assert not Gpu.objects.filter(node=node, mig_enabled=True).exists()  # NVML says MIG is off
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None
    assert set(GpuSample.objects.values_list("gpu__uuid", flat=True)) == {"GPU-node-1-0", "GPU-node-1-1"}


def test_a_scheduled_request_runs_logs_and_succeeds_with_its_exit_status(start_agent, place):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 1")

    rounds_until(agent, lambda: state_of(request) == "succeeded", what="succeeded")

    assert request.started_at is not None and request.exit_code == 0
    assert "done after" in log_of(request)
    steps = (
        Event.objects.filter(object_id=request.pk, content_type__model="gpurequest")
        .exclude(to_state="checkpoint")  # the demo job checkpoints as it ends
        .order_by("id")
    )
    assert [(e.to_state, e.reason) for e in steps][2:] == [
        ("running", "process started"),
        ("succeeded", "process exited with status 0"),
    ]


def test_a_non_zero_exit_status_fails_the_request(start_agent, place):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 0.5 --exit-code 3")

    rounds_until(agent, lambda: state_of(request) == "failed", what="failed")

    assert request.exit_code == 3


def test_the_job_runs_on_its_cards_with_its_slice_and_checkpoint_dir_in_its_environment(
    start_agent, place, settings
):
    agent = start_agent(mps=True)
    request = place(
        'echo "cards=$CUDA_VISIBLE_DEVICES threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE '
        'memory=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT checkpoints=$GPU_PORTAL_CHECKPOINT_DIR"',
        gpu_milli=250,
        memory_mib=20480,
        card=1,
    )

    rounds_until(agent, lambda: state_of(request) == "succeeded", what="succeeded")

    checkpoints = f"{settings.CHECKPOINT_ROOT}/{request.team.slug}/request-{request.pk}"
    assert (
        log_of(request).strip() == f"cards=GPU-node-1-1 threads=25 memory=0=20480M checkpoints={checkpoints}"
    )


def test_utilization_and_memory_follow_the_running_job(start_agent, place, settings):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 30 --gpu-memory-mib 12000", gpu_milli=500, memory_mib=40960)
    rounds_until(agent, lambda: state_of(request) == "running", what="running")

    def busy():
        """The card and the job's own use of its slice both show the job (a loaded machine may need
        more than one round for the job's reading to climb)."""
        latest = GpuSample.objects.filter(gpu__uuid="GPU-node-1-0").order_by("-sampled_at").first()
        own = AllocationSample.objects.filter(allocation__request=request).order_by("-sampled_at").first()
        card_busy = latest is not None and latest.memory_used_mib == 12000 and latest.gpu_util_percent > 10
        return card_busy and own is not None and own.memory_used_mib == 12000 and own.sm_util_percent > 10

    rounds_until(agent, busy, what="the card and the job's slice busy")
    idle = GpuSample.objects.filter(gpu__uuid="GPU-node-1-1").order_by("-sampled_at").first()
    assert (idle.gpu_util_percent, idle.memory_used_mib) == (0, 0)
    # The node's network while the job runs (simulated with its cards): above the slow-network floor.
    host = NodeSample.objects.filter(node__name="node-1").order_by("-sampled_at").first()
    assert host.network_bytes_per_s >= settings.TELEMETRY_NETWORK_FLOOR_BYTES_PER_S


def test_a_released_request_is_stopped_with_sigterm_then_killed_after_the_grace_period(
    start_agent, place, member
):
    agent = start_agent(grace_s=1.5)
    request = place(f"{DEMO_JOB} --seconds 60 --ignore-term")
    rounds_until(agent, lambda: "starting at step" in log_of(request), what="the job's first output")
    job = agent.jobs[request.pk]

    release_request(request, user=member)
    released_at = time.monotonic()
    rounds_until(agent, lambda: request.pk not in agent.jobs, what="the job gone")

    assert time.monotonic() - released_at >= 1.5  # it had its grace period
    assert job.exit_code == -9  # it ignored SIGTERM, so SIGKILL ended it
    request.refresh_from_db()
    assert "SIGTERM received" in log_of(request)
    assert (request.state, request.exit_code) == ("released", -9)  # the user's decision stands


def test_a_job_that_checkpoints_on_sigterm_exits_within_its_grace(start_agent, place, member):
    agent = start_agent(grace_s=20)
    request = place(f"{DEMO_JOB} --seconds 60")
    rounds_until(agent, lambda: "starting at step" in log_of(request), what="the job's first output")

    release_request(request, user=member)
    released_at = time.monotonic()
    rounds_until(agent, lambda: request.pk not in agent.jobs, what="the job gone")

    assert time.monotonic() - released_at < 10
    request.refresh_from_db()
    assert request.exit_code == 143
    assert "writing a checkpoint" in log_of(request)


def test_the_watchdog_stops_a_job_using_more_gpu_memory_than_its_slice(start_agent, place):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 60 --gpu-memory-mib 30000", memory_mib=20480)

    rounds_until(
        agent, lambda: state_of(request) == "failed" and request.pk not in agent.jobs, what="stopped"
    )

    event = Event.objects.filter(object_id=request.pk, to_state="failed").get()
    assert event.reason == "stopped: used 30000 MiB of GPU memory above its slice of 20480 MiB"
    assert request.exit_code == 143  # its SIGTERM handler's status
    assert "SIGTERM received" in log_of(request)


def test_a_job_within_its_memory_keeps_running(start_agent, place):
    agent = start_agent()
    request = place(f"{DEMO_JOB} --seconds 60 --gpu-memory-mib 20480", memory_mib=20480)
    rounds_until(agent, lambda: "step 4:" in log_of(request), what="two seconds of work")

    assert state_of(request) == "running"
    assert agent.jobs[request.pk].stop_deadline is None


def test_a_running_request_without_its_process_starts_again_after_an_agent_restart(start_agent, place):
    first = start_agent()
    request = place(f"{DEMO_JOB} --seconds 60")
    rounds_until(first, lambda: state_of(request) == "running", what="running")
    first.grace_s = 0.1
    first.shutdown()  # the old agent's job is gone; the request still runs as far as the portal knows

    second = start_agent()
    rounds_until(second, lambda: log_of(request).count("starting at step") == 2, what="started again")

    assert state_of(request) == "running"
    assert request.pk in second.jobs


def test_an_agent_runs_only_its_own_nodes_work(start_agent, place, make_node):
    other = make_node("node-2", gpus=1)
    agent = start_agent(for_node=other)
    request = place(f"{DEMO_JOB} --seconds 1")

    for _ in range(5):
        agent.round()

    assert agent.jobs == {}
    assert state_of(request) == "scheduled"


def test_a_request_without_a_command_is_held_running_until_released(start_agent, place, member):
    agent = start_agent()
    request = place("")
    rounds_until(agent, lambda: state_of(request) == "running", what="running")
    for _ in range(5):
        agent.round()
    assert state_of(request) == "running"

    release_request(request, user=member)
    rounds_until(agent, lambda: request.pk not in agent.jobs, what="the hold gone")

    request.refresh_from_db()
    assert (request.state, request.exit_code) == ("released", -15)
    assert log_of(request) == "No command: the allocation is held for you until you release it.\n"


def test_a_command_that_cannot_start_fails_the_request_with_status_127(start_agent, place):
    agent = start_agent()
    request = place("no-such-program --epochs 3")

    rounds_until(agent, lambda: state_of(request) == "failed", what="failed")

    assert (request.exit_code, request.started_at) == (127, None)  # it never ran


def test_the_cards_are_read_every_second_and_several_moments_go_in_one_request(start_agent, node):
    agent = start_agent(interval_s=2.0, sample_period_s=0.5)
    requests = []
    send = agent.client.sample_moments
    agent.client.sample_moments = lambda moments: requests.append(len(moments)) or send(moments)
    rounds = threading.Thread(target=agent.run, daemon=True)
    rounds.start()
    # Rounds at 0 (it registers), 2 and 4 s; a reading every half second. Stopped at the second
    # request, before a round at 6 s: rounds any more often would send fewer moments a request.
    wait_until(lambda: len(requests) >= 2, timeout_s=30, what="two requests of readings")
    agent.stop()
    rounds.join(timeout=10)

    assert len(requests) == 2 and min(requests) >= 4, requests  # 2 s of readings a request
    times = GpuSample.objects.filter(gpu__uuid="GPU-node-1-0").values_list("sampled_at", flat=True)
    assert len(set(times)) == sum(requests)  # every moment stored, once


def test_a_batch_of_readings_the_portal_refuses_is_dropped_not_sent_forever(start_agent, caplog):
    agent = start_agent()
    agent.round()  # registers
    agent.unsent.append((timezone.now() - dt.timedelta(days=2), [{"uuid": "GPU-node-1-0"}]))

    agent.round()

    assert "refused 2 moments of card readings: dropped" in caplog.text
    assert not agent.unsent and not GpuSample.objects.exists()
    agent.round()
    assert GpuSample.objects.count() == 2  # the next round's reading of both cards
