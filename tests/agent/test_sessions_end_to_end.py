"""Interactive sessions end to end: the whole ASGI portal (uvicorn in a thread), a real agent on simulated
cards with its session tunnel, and the `gpu-portal` CLI as a user runs it."""

import datetime as dt
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from django.utils import timezone
from gpu_portal_sdk.node import NodeClient

from agent.node_agent import NodeAgent
from agent.nvml import load_nvml
from demo.agents import simulated_cards
from scheduler_app.models import InteractiveSession
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.requests import submit_request
from teams.services import create_api_token
from tests.agent_fixtures import REPO, rounds_until, unisolated
from tests.e2e.conftest import AsgiServer
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("fresh_channel_layer")  # a layer of its own: see the fixture

CLI = [sys.executable, "-m", "gpu_portal_sdk"]


@pytest.fixture
def portal(sqlite_readers_take_no_table_locks):
    server = AsgiServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def allocation(portal, team, member, make_node, agent_files, tmp_path):
    """A running interactive request on node-1 and its agent's session tunnel. The agent's rounds stop
    once it runs: the tunnel needs none, and the in-memory SQLite test database refuses two writers at
    once (a sample batch and a session's open)."""
    node = make_node("node-1", gpus=2)
    agent = NodeAgent(
        NodeClient(portal.url, issue_agent_credential(node)),
        load_nvml(simulated_cards(node), seed=7),
        isolation=unisolated(tmp_path / "work"),
        interval_s=0.1,
        grace_s=1.0,
        mps=False,
        sessions=True,
    )
    request = submit_request(user=member, team=team, name="notebook", task_type="training", gpu_milli=500)
    run_scheduling_pass()
    rounds_until(agent, lambda: _state(request) == "running", what="running")
    wait_until(agent.sessions.connected.is_set, what="the tunnel connected")
    yield request
    agent.shutdown()


def _state(request) -> str:
    request.refresh_from_db()
    return request.state


def token_of(user) -> str:
    return create_api_token(user, name="cli", expires_at=timezone.now() + dt.timedelta(days=1))[1]


def cli(portal, token, *arguments, **options):
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'sdk'}:{REPO}"}
    return subprocess.Popen(
        [*CLI, "--url", portal.url, "--token", token, *arguments],
        env=environment,
        text=True,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **options},
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_shell_runs_a_command_in_the_allocation_and_returns_its_exit_status(portal, allocation, member):
    command = "echo cards=$CUDA_VISIBLE_DEVICES; id -un; read line; echo got=$line; exit 3"
    shell = cli(portal, token_of(member), "shell", str(allocation.pk), "--", "sh", "-c", command,
                stdin=subprocess.PIPE)  # fmt: skip

    out, err = shell.communicate("hello\n", timeout=30)

    assert shell.returncode == 3, err
    card = allocation.allocations.get().gpu.uuid
    assert out.splitlines() == [f"cards={card}", os.environ.get("USER") or _me(), "got=hello"]
    session = InteractiveSession.objects.get()
    assert (session.kind, session.user, session.command, session.exit_code) == (
        "shell",
        member,
        ["sh", "-c", command],
        3,
    )
    assert session.closed_at is not None


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def test_port_forward_reaches_a_server_started_in_the_allocation(portal, allocation, member):
    token = token_of(member)
    remote, local = free_port(), free_port()
    server = cli(portal, token, "shell", str(allocation.pk), "--",
                 sys.executable, "-m", "http.server", str(remote), "--bind", "127.0.0.1",
                 stdin=subprocess.PIPE)  # fmt: skip
    forward = cli(portal, token, "port-forward", str(allocation.pk), f"{local}:{remote}")
    try:
        assert forward.stdout.readline().startswith("Forwarding")
        wait_until(lambda: _listening(remote), what="the server in the allocation")

        with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=10) as answer:
            page = answer.read().decode()

        assert answer.status == 200 and "Directory listing" in page
        forwarded = InteractiveSession.objects.filter(kind="port-forward")
        wait_until(lambda: forwarded.filter(closed_at__isnull=False).exists(), what="the forward closed")
        assert forwarded.get().port == remote and forwarded.get().bytes_out > len(page)
    finally:
        for process in (forward, server):
            process.kill()
            process.communicate(timeout=10)


def test_port_forward_reaches_no_port_the_allocation_does_not_listen_on(portal, allocation, member):
    outside = socket.socket()
    outside.bind(("127.0.0.1", 0))
    outside.listen()  # the node's own service, not the allocation's
    local = free_port()
    forward = cli(
        portal, token_of(member), "port-forward", str(allocation.pk), f"{local}:{outside.getsockname()[1]}"
    )
    try:
        assert forward.stdout.readline().startswith("Forwarding")
        with socket.create_connection(("127.0.0.1", local), timeout=10) as connection:
            connection.settimeout(10)
            assert connection.recv(100) == b""  # closed without a byte
        assert not _accepted(outside)
    finally:
        forward.kill()
        _, err = forward.communicate(timeout=10)
        outside.close()
    assert "Nothing in this allocation listens" in err


def _accepted(listener) -> bool:
    listener.setblocking(False)
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def test_another_team_and_a_bad_token_are_refused(portal, allocation, outsider):
    for token in (token_of(outsider), "gpp_unknown"):
        shell = cli(portal, token, "shell", str(allocation.pk), "--", "true", stdin=subprocess.DEVNULL)
        _, err = shell.communicate(timeout=30)
        assert shell.returncode == 3 and "Refused" in err
    assert not InteractiveSession.objects.exists()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_large_output_arrives_whole_to_a_client_that_reads_slowly(portal, allocation, member):
    """The relay's window: the agent's side sends no further than the user's side has passed on, so
    a client that stops reading holds the command back and loses nothing (on Redis, a channel's
    unread messages past its capacity would be dropped)."""
    lines = 4_000_000  # 31 MB: more than the sockets' buffers hold
    command = f"seq 1 {lines}; echo end"
    shell = cli(portal, token_of(member), "shell", str(allocation.pk), "--", "sh", "-c", command)
    time.sleep(3)  # the client reads nothing yet: its pipe fills, then its socket, then the relay

    out, err = shell.communicate(timeout=60)

    assert shell.returncode == 0, err
    assert len(out) == len(expected := "".join(f"{n}\n" for n in range(1, lines + 1)) + "end\n")
    assert out == expected
