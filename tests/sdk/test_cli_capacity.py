"""`gpu-portal estimate`, `list` and `show` name the capacity type that runs spot work (live portal)."""

import pytest
from gpu_portal_sdk.cli import main

from scheduler_app.choices import CapacityType
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool


@pytest.fixture
def on_demand_and_spot(make_node):
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    make_node("a100-80gb-node-01", gpus=1)
    make_node("a100-80gb-spot-node-02", gpus=1, pool=spot)


def test_estimate_of_spot_work_names_the_free_spot_node(as_user, member, on_demand_and_spot, capsys):
    # given both nodes free
    as_user(member)
    # when spot work (with fallback, the default) is estimated
    code = main(["estimate", "--gpu", "0.25", "--gpu-model", "A100-80GB", "--spot"])
    # then it would run on the spot node
    assert code == 0
    assert capsys.readouterr().out.startswith("Would start now on a100-80gb-spot-node-02/gpu0.")


def test_list_and_show_say_spot_work_runs_on_on_demand_capacity_when_it_fell_back(
    as_user, member, on_demand_and_spot, capsys
):
    # given the spot card full, then spot work with fallback placed
    as_user(member)
    main(["request", "--gpu", "1", "--spot", "--name", "hog"])
    run_scheduling_pass()
    main(["request", "--gpu", "0.25", "--spot", "--name", "fell-back"])
    run_scheduling_pass()
    capsys.readouterr()
    request = GpuRequest.objects.get(name="fell-back")

    # when it is listed and shown
    assert main(["list", "--search", "fell-back"]) == 0
    listed = capsys.readouterr().out
    assert main(["show", str(request.pk)]) == 0
    shown = capsys.readouterr().out

    # then the billing column and the summary say where it runs, and its segment names pool and capacity
    assert "spot (running on on-demand: fallback)" in listed.splitlines()[1]
    assert shown.startswith(
        f"Request {request.pk} 'fell-back' (vision): 1/4 GPU training, "
        "spot (running on on-demand: fallback), scheduled on a100-80gb-node-01/gpu0"
    )
    assert "a100  on-demand  on-demand" in shown
