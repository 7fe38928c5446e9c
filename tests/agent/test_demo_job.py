"""The demo job checkpoints as a real job should: periodically, on SIGTERM, and resumes from there."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def demo_job(checkpoint_dir: Path | None, *args: str, cwd: Path = REPO) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "GPU_PORTAL_CHECKPOINT_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if checkpoint_dir is not None:
        env["GPU_PORTAL_CHECKPOINT_DIR"] = str(checkpoint_dir)
    return subprocess.Popen(
        [sys.executable, "-m", "agent.demo_job", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(job: subprocess.Popen) -> tuple[int, str]:
    out, _ = job.communicate(timeout=60)
    return job.returncode, out


def test_a_job_resumes_from_its_last_checkpoint(tmp_path):
    ckpt = tmp_path / "request-1"
    first_code, first_out = finish(demo_job(ckpt, "--seconds", "1.5", "--checkpoint-every", "0.5"))

    code, out = finish(demo_job(ckpt, "--seconds", "3"))

    assert first_code == 0 and "done after 3 steps" in first_out
    assert code == 0
    assert "resumed from step 3" in out and "starting at step 3" in out
    assert "done after 6 steps" in out  # only the work left: 3 more steps of 0.5 s
    assert (ckpt / "demo_job.step").read_text() == "6"


def test_checkpoints_come_every_interval_and_touch_the_marker(tmp_path):
    job = demo_job(tmp_path, "--seconds", "60", "--checkpoint-every", "1")
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / ".checkpointed").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        first_mark = (tmp_path / ".checkpointed").stat().st_mtime_ns
        first_step = int((tmp_path / "demo_job.step").read_text())
        while (tmp_path / ".checkpointed").stat().st_mtime_ns == first_mark and time.monotonic() < deadline:
            time.sleep(0.1)

        assert (tmp_path / ".checkpointed").stat().st_mtime_ns > first_mark
        assert int((tmp_path / "demo_job.step").read_text()) > first_step
    finally:
        job.kill()
        job.wait()


def test_sigterm_saves_the_step_and_exits_at_once(tmp_path):
    job = demo_job(tmp_path, "--seconds", "60", "--checkpoint-every", "600")
    assert "starting at step 0" in job.stdout.readline()
    assert job.stdout.readline().startswith("step 4: loss")  # a few steps, no periodic checkpoint yet

    job.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code, out = finish(job)

    assert time.monotonic() - signalled < 5
    assert code == 143  # stopped, not finished: the portal must not take it as a success
    saved = int((tmp_path / "demo_job.step").read_text())
    assert saved >= 2 and f"SIGTERM received at step {saved}: writing a checkpoint" in out
    assert (tmp_path / ".checkpointed").exists()


def test_an_unreadable_checkpoint_starts_over_and_says_so(tmp_path):
    (tmp_path / "demo_job.step").write_text("garbage")

    code, out = finish(demo_job(tmp_path, "--seconds", "0.5"))

    assert code == 0 and f"unreadable checkpoint {tmp_path / 'demo_job.step'}" in out
    assert "done after 1 steps" in out


def test_without_a_checkpoint_dir_nothing_is_written(tmp_path):
    code, out = finish(demo_job(None, "--seconds", "0.5", cwd=tmp_path))

    assert code == 0 and "done after 1 steps" in out
    assert list(tmp_path.iterdir()) == []
