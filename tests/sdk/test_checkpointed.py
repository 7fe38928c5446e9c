"""checkpointed(): a job marks its checkpoint complete for the node agent, from Python or the shell."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_portal_sdk import ConfigurationError, checkpointed
from gpu_portal_sdk.cli import OK, USAGE, main

SDK = Path(__file__).resolve().parents[2] / "sdk"


def test_checkpointed_touches_the_marker_in_the_jobs_checkpoint_dir(tmp_path, monkeypatch):
    job_dir = tmp_path / "team-a" / "request-7"  # not there yet: the first checkpoint makes it
    monkeypatch.setenv("GPU_PORTAL_CHECKPOINT_DIR", str(job_dir))

    marker = checkpointed()

    assert marker == job_dir / ".checkpointed" and marker.is_file()


def test_checkpointed_again_moves_the_markers_time_to_now(tmp_path):
    marker = checkpointed(tmp_path)
    os.utime(marker, (1_000_000, 1_000_000))

    checkpointed(tmp_path)

    assert marker.stat().st_mtime > 1_000_000


def test_an_explicit_path_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_PORTAL_CHECKPOINT_DIR", str(tmp_path / "job"))

    marker = checkpointed(tmp_path / "elsewhere")

    assert marker.parent == tmp_path / "elsewhere" and not (tmp_path / "job").exists()


def test_outside_a_job_without_a_path_checkpointed_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("GPU_PORTAL_CHECKPOINT_DIR", raising=False)

    with pytest.raises(
        ConfigurationError, match=r"not running as a GPU Portal job \(GPU_PORTAL_CHECKPOINT_DIR is not set\)"
    ):
        checkpointed()


def test_the_cli_subcommand_marks_the_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPU_PORTAL_CHECKPOINT_DIR", str(tmp_path))

    assert main(["checkpointed"]) == OK

    assert (tmp_path / ".checkpointed").is_file()
    assert str(tmp_path / ".checkpointed") in capsys.readouterr().out


def test_the_cli_subcommand_outside_a_job_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("GPU_PORTAL_CHECKPOINT_DIR", raising=False)

    assert main(["checkpointed"]) == USAGE

    assert "GPU_PORTAL_CHECKPOINT_DIR is not set" in capsys.readouterr().err


def test_gpu_portal_checkpointed_runs_as_its_own_process_without_a_portal(tmp_path):
    """No address, no token, no saved login: the command never contacts the portal."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SDK), "HOME": "/nonexistent"}

    done = subprocess.run(
        [sys.executable, "-m", "gpu_portal_sdk", "checkpointed", str(tmp_path / "ckpt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == OK, done.stderr
    assert (tmp_path / "ckpt" / ".checkpointed").is_file()
