"""Issue 8's acceptance: a training script with no set-up code, run as its own process with only
environment variables, against the live demo (`manage.py serve` with the in-process worker, seeded as
`bin/run-portal` seeds it). Every node's agent is stood in for by one batch of card readings posted to
the real ingest endpoint with that node's credential, so the script reads real utilization."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from tests.embedded_portal import embedded_portal

SDK = Path(__file__).resolve().parents[2] / "sdk"

SCRIPT = """
import json
from gpu_portal_sdk import ResourceManager

portal = ResourceManager()
allocation = portal.request_allocation(task_type="training", min_gpu=0.5, prefer_spot=True)
usage = portal.get_utilization(allocation.resource_id)
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

# Run inside the demo's database: alice's token (Vision's admin) and each node's agent credential.
SET_UP = """
import datetime as dt, json
from django.contrib.auth import get_user_model
from django.utils import timezone
from scheduler_app.models import Node
from scheduler_app.services.inventory import issue_agent_credential
from teams.services import create_api_token
alice = get_user_model().objects.get(username="alice")
_, token = create_api_token(alice, name="script", expires_at=timezone.now() + dt.timedelta(hours=1))
nodes = {
    node.name: {
        "credential": issue_agent_credential(node),
        "cards": [(gpu.uuid, gpu.memory_mib) for gpu in node.gpus.order_by("index")],
    }
    for node in Node.objects.all()
}
print(json.dumps({"token": token, "nodes": nodes}))
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with embedded_portal(tmp_path_factory.mktemp("demo")) as portal:
        yield portal, json.loads(portal.manage("shell", "-v0", "-c", SET_UP))


def agents_report(url: str, nodes: dict) -> None:
    """Each node's cards at 37 % util with a quarter of their memory used, read now."""
    for node in nodes.values():
        body = {
            "sampled_at": timezone.now().isoformat(),
            "gpus": [
                {
                    "uuid": uuid,
                    "gpu_util_percent": 37,
                    "memory_used_mib": memory_mib // 4,
                    "power_mw": 250_000,
                    "temperature_c": 60,
                }
                for uuid, memory_mib in node["cards"]
            ],
        }
        headers = {"Authorization": f"Bearer {node['credential']}"}
        response = requests.post(f"{url}/api/v1/agent/samples/", json=body, headers=headers, timeout=10)
        assert response.status_code == 200, response.text


def test_a_script_with_only_environment_variables_gets_a_gpu_reads_it_and_releases_it(demo, tmp_path):
    portal, secrets = demo
    agents_report(portal.url, secrets["nodes"])
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),  # no saved login: the environment is all it has
        "PYTHONPATH": str(SDK),
        "GPU_PORTAL_URL": portal.url,
        "GPU_PORTAL_TOKEN": secrets["token"],
    }

    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] in {"scheduled", "running"} and len(result["where"]) == 1
    assert (result["gpu_util"], result["mem_util"]) == (37.0, 25.0)
    assert result["released"] in {"cancelled", "succeeded"}
    answer = requests.get(
        f"{portal.url}/api/v1/requests/{result['resource_id']}/",
        headers={"Authorization": f"Bearer {secrets['token']}"},
        timeout=10,
    ).json()
    assert (answer["state"], answer["allocations"]) == (result["released"], [])
