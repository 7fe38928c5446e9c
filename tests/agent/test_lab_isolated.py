"""JupyterLab end to end on an isolated node: the whole ASGI portal, an agent as root starting a real
Jupyter server in a 1/4-card interactive allocation, and a client speaking Jupyter's REST and kernel
websocket protocol through the portal's proxy only. The cell runs as the team's account with the slice's
cards and share; another team's member and an anonymous client get 403."""

import asyncio
import json
import os
import shutil
import subprocess
import sysconfig
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from agent.isolation.identity import team_account
from scheduler_app.models import InteractiveSession
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import submit_request
from tests.agent.hostile_jobs import kill_leftovers
from tests.agent.test_sessions_end_to_end import _state, token_of
from tests.agent.test_sessions_isolated import PREFIX, isolated_agent, portal  # noqa: F401  (fixtures)
from tests.agent_fixtures import rounds_until
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("fresh_channel_layer")  # a layer of its own: see the fixture

CELL = (
    "import os, subprocess\n"
    "print('cards=' + os.environ['CUDA_VISIBLE_DEVICES'], 'milli=' + os.environ['GPU_PORTAL_GPU_MILLI'],"
    " 'user=' + subprocess.check_output(['id', '-un'], text=True).strip())"
)


@pytest.fixture
def scratch():
    """As the sessions' isolation tests, on a shorter path: Jupyter's Unix socket in the job's work
    directory must fit a socket's 107 characters."""
    if os.geteuid() != 0:
        pytest.fail("the isolation tests run real jobs as other users: run them as root (CI does)")
    folder = Path(f"/var/tmp/gpl-{uuid.uuid4().hex[:8]}")
    folder.mkdir(mode=0o711)
    yield folder
    kill_leftovers(str(folder))
    shutil.rmtree(folder, ignore_errors=True)


def lab_python(folder) -> str:
    """A Python the team's account may run (the test's own lies under root's 0700 home): the system's,
    in a virtual environment that sees this one's packages (JupyterLab, ipykernel)."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python3*/site-packages"))
    (site / "portal-env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return str(folder / "bin" / "python")


@pytest.fixture
def lab_agent(portal, settings, scratch, agent_files, make_node, team, member):  # noqa: F811
    """An isolated agent running the member's team's 1/4-card interactive request on node-1."""
    settings.CHECKPOINT_ROOT = str(scratch / "checkpoints")
    node = make_node("node-1", gpus=1)
    agent = isolated_agent(portal, node, scratch, lab_python=lab_python(scratch / "labenv"))
    agent.request = submit_request(user=member, team=team, name="nb", task_type="training", gpu_milli=250)
    run_scheduling_pass()
    rounds_until(agent, lambda: _state(agent.request) == "running", what="running")
    wait_until(agent.sessions.connected.is_set, what="the tunnel connected")
    yield agent
    agent.grace_s = 0.2
    agent.shutdown()


def call(url: str, token: str | None, method: str = "GET", body: dict | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def execute_request(code: str) -> dict:
    header = {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "username": "test",
              "session": uuid.uuid4().hex, "version": "5.3", "date": "2025-01-01T00:00:00Z"}  # fmt: skip
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}  # fmt: skip
    return {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}


async def run_cell(ws_url: str, token: str, origin: str, code: str) -> str:
    """The cell's printed output, once the kernel is idle again after it."""
    async with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}, origin=origin) as ws:
        message = execute_request(code)
        await ws.send(json.dumps(message))
        output = ""
        while True:
            reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
            if reply["parent_header"].get("msg_id") != message["header"]["msg_id"]:
                continue
            if reply["msg_type"] == "stream":
                output += reply["content"]["text"]
            elif reply["msg_type"] == "error":
                raise AssertionError(reply["content"])
            elif reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                return output


async def refused_websocket(ws_url: str, token: str | None, origin: str) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with connect(ws_url, additional_headers=headers, origin=origin):
            return 101
    except InvalidStatus as error:
        return error.response.status_code


def test_a_cell_runs_in_the_slice_as_the_team_and_others_get_403(portal, lab_agent, member, outsider):  # noqa: F811
    request = lab_agent.request
    lab = f"{portal.url}/requests/{request.pk}/lab/"
    token = token_of(member)

    status, body = call(f"{lab}api/kernels", token, "POST", {"name": "python3"})
    assert status == 201, body
    kernel = json.loads(body)["id"]
    ws_url = lab.replace("http://", "ws://") + f"api/kernels/{kernel}/channels"
    output = asyncio.run(run_cell(ws_url, token, portal.url, CELL))

    card = request.allocations.get().gpu.uuid
    assert output.split() == [f"cards={card}", "milli=250", f"user={team_account(PREFIX, 'vision')}"]
    status, page = call(f"{lab}lab", token)
    assert status == 200 and b"JupyterLab" in page
    lab_session = InteractiveSession.objects.get(kind="lab")
    assert lab_session.user == member and lab_session.request.last_activity_at is not None  # the cell ran

    stranger = token_of(outsider)
    assert call(f"{lab}lab", stranger)[0] == 403
    assert call(f"{lab}api/kernels", stranger)[0] == 403
    assert call(f"{lab}lab", None)[0] == 403
    assert asyncio.run(refused_websocket(ws_url, stranger, portal.url)) == 403
    assert asyncio.run(refused_websocket(ws_url, None, portal.url)) == 403
    assert InteractiveSession.objects.filter(kind="lab").count() == 1
