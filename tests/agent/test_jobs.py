"""A job as a process, without the portal: its environment, how its command runs, its output buffer."""

import datetime as dt
import time

import pytest

from agent.jobs import Job, Slice, argv, job_environment, mps_available
from tests.agent_fixtures import unisolated


def work(command, tmp_path, gpus=(("GPU-a", 250, 20480),)):
    return {
        "request_id": 7,
        "task_type": "inference",
        "command": command,
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "gpus": [{"uuid": u, "milli": m, "memory_mib": mib} for u, m, mib in gpus],
    }


@pytest.fixture
def isolation(tmp_path):
    return unisolated(tmp_path / "work")


def ended(job, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while not job.finished():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)


@pytest.mark.parametrize(("milli", "threads"), [(125, "13"), (250, "25"), (1000, "100"), (1, "1")])
def test_mps_limits_come_from_the_share_and_memory_per_visible_card(tmp_path, milli, threads):
    slices = [Slice("GPU-a", milli, 10240), Slice("GPU-b", milli, 10240)]

    env = job_environment(work("x", tmp_path), slices, mps=True)

    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == threads
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M,1=10240M"


def test_without_mps_no_mps_limits_are_set(tmp_path):
    env = job_environment(work("x", tmp_path), [Slice("GPU-a", 250, 20480)], mps=False)

    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    assert env["GPU_PORTAL_GPU_MEMORY_MIB"] == "20480"


def test_a_mig_slice_names_its_instance_and_gets_no_mps_limits(tmp_path):
    slices = [Slice("GPU-a", 142, 10240, "1g.10gb@6")]

    env = job_environment(work("x", tmp_path), slices, mps=True)

    assert env["GPU_PORTAL_MIG_INSTANCES"] == "1g.10gb@6"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env


def test_a_plain_command_runs_as_itself_and_shell_syntax_under_sh():
    assert argv("python train.py --epochs 3") == ["python", "train.py", "--epochs", "3"]
    assert argv("python train.py && echo done") == ["/bin/sh", "-c", "python train.py && echo done"]


def test_stdout_and_stderr_are_captured_and_the_checkpoint_dir_made(isolation, tmp_path):
    job = Job(work("echo out; echo err >&2; exit 3", tmp_path), mps=False, isolation=isolation)
    ended(job)

    assert job.exit_code == 3
    assert job.unshipped(100) == (0, "out\nerr\n")
    assert (tmp_path / "ckpt").is_dir()


def test_shipping_drops_what_the_portal_stored(isolation, tmp_path):
    job = Job(work("printf abcdef", tmp_path), mps=False, isolation=isolation)
    ended(job)

    job.mark_shipped(4)

    assert job.unshipped(100) == (4, "ef")


def test_output_the_portal_has_not_taken_is_bounded_keeping_the_newest(isolation, tmp_path, monkeypatch):
    monkeypatch.setattr("agent.jobs.MAX_UNSHIPPED_CHARS", 10)
    job = Job(work("printf 0123456789abcdef", tmp_path), mps=False, isolation=isolation)
    ended(job)

    assert job.unshipped(100) == (6, "6789abcdef")


def test_a_restarted_job_appends_where_the_stored_log_ends(isolation, tmp_path):
    job = Job({**work("printf more", tmp_path), "log_offset": 120}, mps=False, isolation=isolation)
    ended(job)

    assert job.unshipped(100) == (120, "more")


def test_mps_is_used_only_where_its_control_daemon_runs(tmp_path, monkeypatch):
    tools = tmp_path / "bin"
    tools.mkdir()
    control = tools / "nvidia-cuda-mps-control"
    pipe = tmp_path / "mps-pipe"
    pipe.mkdir()
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))

    assert not mps_available()  # neither the tool nor the daemon's pipe
    control.write_text("#!/bin/sh\n")
    control.chmod(0o755)
    assert not mps_available()  # the tool, but no daemon
    (pipe / "control").touch()
    assert mps_available()


def test_the_stop_file_is_written_in_place_of_a_link_the_job_left_never_through_it(isolation, tmp_path):
    victim = tmp_path / "root-only"
    victim.write_text("untouched")
    job = Job(work("sleep 30", tmp_path), mps=False, isolation=isolation)
    (tmp_path / "ckpt" / ".stop_by").symlink_to(victim)

    job.stop_by(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5), "moving")
    ended(job)

    assert victim.read_text() == "untouched"
    assert not (tmp_path / "ckpt" / ".stop_by").is_symlink()
