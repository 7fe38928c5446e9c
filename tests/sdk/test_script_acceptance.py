"""Issue 8's acceptance: a training script with no set-up code, run as its own process with only
environment variables, against the live demo as `bin/run-portal` runs it (`manage.py serve
--simulated-agents`: the in-process worker, and the real node agent on simulated GPUs for every demo
node), so the utilization the script reads is what the agent of its node measured."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.embedded_portal import embedded_portal

SDK = Path(__file__).resolve().parents[2] / "sdk"

SCRIPT = """
import json, time
from gpu_portal_sdk import ResourceManager

portal = ResourceManager()
allocation = portal.request_allocation(task_type="training", min_gpu=0.5, prefer_spot=True)
for _ in range(30):  # the node's agent reports every 2 s: the first readings come within seconds
    usage = portal.get_utilization(allocation.resource_id)
    if usage.gpu_util:
        break
    time.sleep(1)
released = portal.release(allocation.resource_id)
print(json.dumps({
    "resource_id": allocation.resource_id,
    "state": allocation.state,
    "where": [a.node for a in allocation.allocations],
    "gpu_util": usage.gpu_util,
    "mem_util": usage.mem_util,
    "released": released.state,
}))
"""

# Run inside the demo's database: a token for alice (Vision's admin).
SET_UP = """
import datetime as dt
from django.contrib.auth import get_user_model
from django.utils import timezone
from teams.services import create_api_token
alice = get_user_model().objects.get(username="alice")
_, token = create_api_token(alice, name="script", expires_at=timezone.now() + dt.timedelta(hours=1))
print(token)
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with embedded_portal(tmp_path_factory.mktemp("demo"), "--simulated-agents") as portal:
        yield portal, portal.manage("shell", "-v0", "-c", SET_UP).strip()


def test_a_script_with_only_environment_variables_gets_a_gpu_reads_it_and_releases_it(demo, tmp_path):
    portal, token = demo
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),  # no saved login: the environment is all it has
        "PYTHONPATH": str(SDK),
        "GPU_PORTAL_URL": portal.url,
        "GPU_PORTAL_TOKEN": token,
    }

    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] in {"scheduled", "running"} and len(result["where"]) == 1
    # Measured by the node's agent on its simulated card: a training slice keeps its card busy.
    assert 0 < result["gpu_util"] <= 100 and 0 < result["mem_util"] <= 100, result
    assert result["released"] in {"cancelled", "released"}
    headers = {"Authorization": f"Bearer {token}"}
    answer = requests.get(
        f"{portal.url}/api/v1/requests/{result['resource_id']}/", headers=headers, timeout=10
    )
    assert (answer.json()["state"], answer.json()["allocations"]) == (result["released"], [])
