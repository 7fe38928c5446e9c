"""The set-up scripts of bin/, run against stand-ins for pip, apt-get, id and sudo that only log."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stand_in(folder: Path, name: str, body: str = "") -> None:
    """An executable `name` that appends its arguments to calls.log, then runs `body`."""
    script = folder / name
    script.write_text(f'#!/bin/bash\necho "{name} $*" >>"{folder}/calls.log"\n{body}\n')
    script.chmod(0o755)


def calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def checkout(tmp_path):
    """A scratch checkout: bin/_venv.sh, both requirements files, and a .venv whose python only logs."""
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "bin" / "_venv.sh", tmp_path / "bin")
    (tmp_path / "requirements.txt").write_text("Django==5.2.19\n")
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\npytest==9.2.0\n")
    (tmp_path / "sdk").mkdir()
    (tmp_path / "sdk" / "pyproject.toml").write_text("[project]\n")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    stand_in(tmp_path / ".venv" / "bin", "python")
    return tmp_path


def ensure_venv(checkout: Path, requirements: str) -> list[str]:
    """The pip installs that `ensure_venv requirements` ran."""
    venv_bin = checkout / ".venv" / "bin"
    before = len(calls(venv_bin))
    subprocess.run(
        ["bash", "-c", f"source bin/_venv.sh && ensure_venv {requirements}"], cwd=checkout, check=True
    )
    return [call for call in calls(venv_bin)[before:] if call.endswith(f"-r {requirements}")]


def test_run_portal_after_bin_test_installs_nothing(checkout):
    assert len(ensure_venv(checkout, "requirements-dev.txt")) == 1

    assert ensure_venv(checkout, "requirements.txt") == []


def test_bin_test_after_run_portal_still_installs_the_dev_requirements(checkout):
    assert len(ensure_venv(checkout, "requirements.txt")) == 1

    assert len(ensure_venv(checkout, "requirements-dev.txt")) == 1


def test_a_changed_requirement_is_installed_again(checkout):
    ensure_venv(checkout, "requirements-dev.txt")
    (checkout / "requirements.txt").write_text("Django==5.2.20\n")

    assert len(ensure_venv(checkout, "requirements.txt")) == 1


def run_script(checkout: Path, script: str, var_dir: str | None) -> subprocess.CompletedProcess:
    """bin/`script` in the scratch checkout, from elsewhere, with PORTAL_VAR_DIR=`var_dir` (None: unset).

    python, ruff and pytest only log; a manage.py command fails unless the directory the setting names
    is there when it runs. The packages' install is a stand-in too (bin/test would install them), and so
    is the Slurm test cluster bin/test starts."""
    shutil.copy(ROOT / "bin" / script, checkout / "bin")
    shutil.copy(ROOT / "bin" / "_packages.sh", checkout / "bin")
    stand_in(checkout / "bin", "slurm-test-cluster")
    venv_bin = checkout / ".venv" / "bin"
    stand_in(venv_bin, "python", '[[ "$1" != manage.py || -d "${PORTAL_VAR_DIR-var}" ]] || exit 3')
    for tool in ("ruff", "pytest"):
        stand_in(venv_bin, tool)
    tools = checkout / "tools"
    tools.mkdir(exist_ok=True)
    stand_in(tools, "id", "echo 0")
    stand_in(tools, "apt-get")
    env = {k: v for k, v in os.environ.items() if k not in {"PORTAL_VAR_DIR", "VIRTUAL_ENV"}}
    env["PATH"] = f"{tools}:/usr/bin:/bin"
    if var_dir is not None:
        env["PORTAL_VAR_DIR"] = var_dir
    return subprocess.run(
        [str(checkout / "bin" / script)], cwd=checkout.parent, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("script", "last"),
    [("run-portal", "python manage.py serve --port 8000 --simulated-agents"), ("test", "pytest")],
)
def test_scripts_create_the_var_dir_the_setting_names_and_run_again(checkout, tmp_path, script, last):
    var_dir = tmp_path / "elsewhere" / "not-yet" / "var"

    first = run_script(checkout, script, str(var_dir))
    again = run_script(checkout, script, str(var_dir))

    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    assert var_dir.is_dir()
    assert not (checkout / "var").exists()
    assert calls(checkout / ".venv" / "bin")[-1].strip() == last  # it ran to its end
    if script == "test":  # the Slurm backend's tests run against the cluster it starts first
        assert [line.strip() for line in calls(checkout / "bin")] == ["slurm-test-cluster start"] * 2


@pytest.mark.parametrize(("var_dir", "made"), [(None, "var"), ("scratch/db", "scratch/db")])
def test_run_portal_makes_var_or_a_relative_var_dir_under_the_repository_root(checkout, var_dir, made):
    done = run_script(checkout, "run-portal", var_dir)

    assert done.returncode == 0, done.stderr
    assert (checkout / made).is_dir()


def ensure_missing(tmp_path: Path, *, uid: int, sudo: bool = True, apt_fails: bool = False, what="chromium"):
    """Run ensure_`what` for a missing program with only stand-ins on PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    stand_in(tools, "id", f"echo {uid}")
    stand_in(tools, "apt-get", "exit 100" if apt_fails else "")
    if sudo:
        stand_in(tools, "sudo", '"$@"')
    result = subprocess.run(
        ["/bin/bash", "-c", f"source {ROOT / 'bin' / '_packages.sh'} && ensure_{what} {tmp_path}/{what}"],
        env={"PATH": str(tools)},
        capture_output=True,
        text=True,
    )
    return result, [call for call in calls(tools) if not call.startswith("id")]


def test_chromium_install_says_what_and_why_and_runs_as_root(tmp_path):
    result, ran = ensure_missing(tmp_path, uid=0)

    assert result.returncode == 0, result.stderr
    assert "installing Debian's chromium package with apt-get" in result.stdout
    assert "browser tests" in result.stdout
    assert ran == ["apt-get update -qq", "apt-get install -y -qq chromium"]


def test_chromium_install_uses_sudo_when_not_root(tmp_path):
    result, ran = ensure_missing(tmp_path, uid=1000)

    assert result.returncode == 0, result.stderr
    assert ran[:2] == ["sudo apt-get update -qq", "apt-get update -qq"]
    assert "sudo apt-get install -y -qq chromium" in ran


def test_chromium_install_fails_clearly_without_root_or_sudo(tmp_path):
    result, ran = ensure_missing(tmp_path, uid=1000, sudo=False)

    assert result.returncode == 1
    assert "needs root, and sudo is not available" in result.stderr
    assert "apt-get install chromium" in result.stderr
    assert ran == []


def test_chromium_install_fails_clearly_when_apt_get_fails(tmp_path):
    result, _ = ensure_missing(tmp_path, uid=0, apt_fails=True)

    assert result.returncode == 1
    assert "apt-get could not install chromium" in result.stderr


def test_a_present_chromium_is_left_alone(tmp_path):
    (tmp_path / "chromium").write_text("#!/bin/sh\n")
    (tmp_path / "chromium").chmod(0o755)

    result, ran = ensure_missing(tmp_path, uid=1000, sudo=False)

    assert result.returncode == 0
    assert ran == [] and result.stdout == ""


def test_bubblewrap_is_installed_the_same_way_saying_why(tmp_path):
    result, ran = ensure_missing(tmp_path, uid=0, what="bubblewrap")

    assert result.returncode == 0, result.stderr
    assert "installing Debian's bubblewrap package" in result.stdout and "isolation tests" in result.stdout
    assert ran == ["apt-get update -qq", "apt-get install -y -qq bubblewrap"]
