"""`gpu-portal reclaim` against the live portal: operators reclaim a spot node by its name."""

from gpu_portal_sdk.cli import main

from scheduler_app.choices import CapacityType, NodeStatus
from scheduler_app.services.inventory import create_pool, register_node


def test_an_operator_reclaims_a_node_with_the_cli(
    live_server, transactional_db, token, operator, monkeypatch, capsys
):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    node, _ = register_node(pool=spot, name="spot-9", cpu_milli=1000, memory_mib=1024, gpus=[])
    monkeypatch.setenv("GPU_PORTAL_URL", live_server.url)
    monkeypatch.setenv("GPU_PORTAL_TOKEN", token(operator))

    assert main(["reclaim", "spot-9", "--grace", "60"]) == 0
    assert "node spot-9 is reclaimed" in capsys.readouterr().out
    assert main(["reclaim", "nowhere"]) == 4
    node.refresh_from_db()
    assert node.status == NodeStatus.RECLAIMED
