"""Interactive sessions on an isolated node (the agent as root, bubblewrap, the job's cgroup): a session
runs as its request's job does, as the team's Unix account with the job's allow-listed environment,
in a cgroup inside the job's, seeing no other job's directories; and when it ends, however the user
left, everything it started ends with it."""

import contextlib
import os
import pty
import re
import subprocess
import threading
from pathlib import Path

import psutil
import pytest
from gpu_portal_sdk.node import NodeClient

from agent.isolation import Isolation
from agent.isolation.identity import Identities, team_account
from agent.node_agent import NodeAgent
from agent.nvml import load_nvml
from demo.agents import simulated_cards
from scheduler_app.models import InteractiveSession
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.requests import submit_request
from tests.agent.hostile_jobs import wait_for
from tests.agent.test_isolation import scratch  # noqa: F401  (fixture)
from tests.agent.test_sessions_end_to_end import _state, cli, token_of
from tests.agent_fixtures import rounds_until
from tests.e2e.conftest import AsgiServer
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("fresh_channel_layer")  # a layer of its own: see the fixture

PREFIX = "gppt-"
SENTINEL = "GPP_SESSION_LEAK_SENTINEL"
SHELL_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}  # what the shell itself sets
MARK = "1000.25"  # the session's background sleep, found by its argument


@pytest.fixture
def portal(sqlite_readers_take_no_table_locks):
    server = AsgiServer()
    server.start()
    yield server
    server.stop()


def isolated_agent(portal, node, folder: Path, **options) -> NodeAgent:
    """An agent of `node`, in this process (as root), isolating its jobs and sessions under `folder`
    with the test accounts (PREFIX), its rounds run by the test."""
    identities = Identities(prefix=PREFIX, home_root=str(folder / "home"))
    return NodeAgent(
        NodeClient(portal.url, issue_agent_credential(node)),
        load_nvml(simulated_cards(node), seed=7),
        isolation=Isolation.detect(work_root=str(folder / "work"), identities=identities),
        interval_s=0.1,
        grace_s=1.0,
        mps=False,
        sessions=True,
        **options,
    )


@pytest.fixture
def node_agent(portal, settings, scratch, agent_files, make_node, team, member, other_team, outsider,  # noqa: F811
               monkeypatch):  # fmt: skip
    """An isolated agent (in this process, as root) running two interactive requests on node-1: the
    member's team's and another team's."""
    settings.CHECKPOINT_ROOT = str(scratch / "checkpoints")
    monkeypatch.setenv(SENTINEL, "the agent's own secret")
    node = make_node("node-1", gpus=2)
    agent = isolated_agent(portal, node, scratch)
    ours = submit_request(user=member, team=team, name="notebook", task_type="training", gpu_milli=1000)
    theirs = submit_request(
        user=outsider, team=other_team, name="other", task_type="training", gpu_milli=1000
    )
    run_scheduling_pass()
    rounds_until(agent, lambda: _state(ours) == _state(theirs) == "running", what="both running")
    wait_until(agent.sessions.connected.is_set, what="the tunnel connected")
    agent.ours, agent.theirs = ours, theirs
    yield agent
    agent.grace_s = 0.2
    agent.shutdown()


def test_a_session_runs_as_the_team_with_the_jobs_environment_and_sees_no_other_job(
    portal, node_agent, member
):
    ours, theirs = node_agent.jobs[node_agent.ours.pk], node_agent.jobs[node_agent.theirs.pk]
    others = [theirs.sandbox.workdir, theirs.checkpoint_dir, Path(theirs.sandbox.identity.home)]
    looks = "; ".join(f"test -e {path} && echo seen={path}" for path in others)
    command = f"id -un; cat /proc/self/cgroup; echo cards=$CUDA_VISIBLE_DEVICES; {looks}; echo ---; env"
    shell = cli(portal, token_of(member), "shell", str(node_agent.ours.pk), "--", "sh", "-c", command,
                stdin=subprocess.DEVNULL)  # fmt: skip

    out, err = shell.communicate(timeout=60)

    assert shell.returncode == 0, err
    head, environment = out.split("---\n")
    lines = head.splitlines()
    assert lines[0] == team_account(PREFIX, "vision") != "root"
    # Its cgroup namespace is rooted at its own cgroup: it sees no other (and the host's view is below).
    assert {line.split(":", 2)[2] for line in lines if re.match(r"\d+:", line)} == {"/"}
    assert f"cards={node_agent.ours.allocations.get().gpu.uuid}" in lines
    assert not [line for line in lines if line.startswith("seen=")], lines
    names = {line.split("=", 1)[0] for line in environment.splitlines() if "=" in line}
    assert names - SHELL_OWN == set(ours.environment) | {"TERM"}
    assert SENTINEL not in names and "DJANGO_SETTINGS_MODULE" not in names
    assert all(path.exists() for path in others)  # there, but not to the session


def test_what_a_session_left_running_dies_when_its_user_disconnects(portal, node_agent, member):
    shell = cli(portal, token_of(member), "shell", str(node_agent.ours.pk), "--",
                "sh", "-c", f"setsid sleep {MARK} & echo started; cat", stdin=subprocess.PIPE)  # fmt: skip
    assert shell.stdout.readline() == "started\n"
    sleeper = wait_for(lambda: _sleeper(node_agent.ours.pk), "the session's sleep")
    job_cgroup = node_agent.jobs[node_agent.ours.pk].sandbox.cgroup
    session = InteractiveSession.objects.get()
    assert sleeper.uids().real == pwd_uid(team_account(PREFIX, "vision"))
    # The host's view of its cgroup: the session's own, inside the job's.
    inside = f"/{job_cgroup.main.relative_to(job_cgroup.main.parents[2])}/session-{session.key}"
    lines = Path(f"/proc/{sleeper.pid}/cgroup").read_text().splitlines()
    assert any(line.split(":", 2)[2] == inside for line in lines), lines

    shell.kill()  # the user's side goes without a word
    shell.communicate(timeout=10)

    wait_until(lambda: _gone(sleeper), what="the sleep killed")
    inner = job_cgroup.main / f"session-{session.key}"
    wait_until(lambda: not inner.exists(), what="the session's cgroup removed")
    assert node_agent.jobs[node_agent.ours.pk].sandbox.alive(0)  # the job itself runs on


def test_a_terminals_background_job_dies_when_the_shell_exits(portal, node_agent, member):
    main, terminal = pty.openpty()
    shell = cli(portal, token_of(member), "shell", str(node_agent.ours.pk),
                stdin=terminal, stdout=terminal, stderr=terminal)  # fmt: skip
    os.close(terminal)
    screen = Screen(main)
    wait_until(lambda: screen.text.rstrip().endswith("$"), what="the prompt")  # typed before, it may be lost
    os.write(main, f"sleep {MARK} & echo started-$((6 * 7))\n".encode())
    wait_until(lambda: "started-42" in screen.text, what="the shell's answer")
    sleeper = wait_for(lambda: _sleeper(node_agent.ours.pk), "the terminal's sleep")

    os.write(main, b"exit\n")
    shell.wait(timeout=30)

    wait_until(lambda: _gone(sleeper), what="the sleep killed")
    assert InteractiveSession.objects.get().closed_at is not None


class Screen:
    """What the CLI writes to its terminal, read as it comes (a full terminal would block it)."""

    def __init__(self, fd: int):
        self.fd, self.text = fd, ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        with contextlib.suppress(OSError):
            while data := os.read(self.fd, 4096):
                self.text += data.decode(errors="replace")
        os.close(self.fd)


def _gone(process: psutil.Process) -> bool:
    return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


def _sleeper(request_id: int) -> psutil.Process | None:
    for process in psutil.process_iter():
        try:
            if process.cmdline() == ["sleep", MARK] and process.environ().get("GPU_PORTAL_REQUEST_ID") == str(
                request_id
            ):
                return process
        except psutil.Error:
            continue
    return None


def pwd_uid(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid
