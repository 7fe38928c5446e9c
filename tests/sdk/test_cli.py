"""`gpu-portal` end to end against the live portal: output and the exit codes scripts rely on."""

import json
import subprocess
import sys

import pytest
from django.core.cache import cache
from gpu_portal_sdk.cli import main

from billing_app.services import set_pool_price
from infra.api.throttling import PerUserRateThrottle
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import submit_request


def test_request_list_show_and_cancel(as_user, member, cluster, capsys):
    as_user(member)

    code = main(
        [
            "request",
            "--gpu",
            "0.25",
            "--name",
            "cli-train",
            "--on-demand",
            "--",
            "python",
            "train.py",
            "--lr",
            "3e-4",
        ]
    )
    out = capsys.readouterr().out

    assert code == 0
    request = GpuRequest.objects.get()
    assert f"Request {request.pk} 'cli-train' (vision): 1/4 GPU training, on-demand, pending" in out
    assert (request.command, request.gpu_milli, request.billing_mode) == (
        "python train.py --lr 3e-4",
        250,
        "on-demand",
    )

    run_scheduling_pass()
    assert main(["list", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["state"], listed["allocations"][0]["node"]) == (
        request.pk,
        "scheduled",
        "node-1",
    )

    assert main(["list", "--state", "pending"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ID  NAME  TEAM  TASK  SHARE  BILLING  STATE  WHERE  CREATED"
    ]

    assert main(["show", str(request.pk)]) == 0
    shown = capsys.readouterr().out
    assert "command: python train.py --lr 3e-4" in shown
    assert "node-1/gpu" in shown and "scheduled" in shown

    assert main(["cancel", str(request.pk)]) == 0
    assert "cancelled" in capsys.readouterr().out


def test_estimate_and_wait_on_a_full_cluster(as_user, member, team_admin, team, make_node, capsys):
    make_node(gpus=1)
    submit_request(user=team_admin, team=team, name="hog", task_type="training", gpu_milli=1000)
    run_scheduling_pass()
    as_user(member)

    assert main(["estimate", "--gpu", "0.5", "--on-demand"]) == 0
    assert capsys.readouterr().out.startswith("Would wait: ")

    code = main(["request", "--gpu", "0.5", "--on-demand", "--wait", "--wait-timeout", "0"])

    assert code == 6
    assert "the request was cancelled" in capsys.readouterr().err
    assert GpuRequest.objects.get(name__startswith="training-").state == "cancelled"


def test_placed_request_reports_health(as_user, member, team, cluster, capsys):
    request = submit_request(user=member, team=team, name="train", task_type="training", gpu_milli=250)
    run_scheduling_pass()
    as_user(member)

    assert main(["health", str(request.pk), "--json"]) == 0
    health = json.loads(capsys.readouterr().out)

    assert (health["state"], health["nodes"][0]["name"], health["nodes"][0]["heartbeating"]) == (
        "scheduled",
        "node-1",
        False,  # no agent has sent a heartbeat yet
    )
    assert (health["healthy"], health["reason"]) == (False, "node node-1: no heartbeat from its agent yet")

    assert main(["health", str(request.pk)]) == 0
    assert capsys.readouterr().out.startswith(
        f"Request {request.pk} scheduled: not healthy: node node-1: no heartbeat from its agent yet\n"
    )


def test_exit_codes(as_user, member, outsider, team, cluster, closed_port, monkeypatch, capsys):
    theirs = submit_request(user=member, team=team, name="mine", task_type="training", gpu_milli=250)
    as_user(outsider)

    assert main(["show", str(theirs.pk)]) == 4
    assert main(["request", "--gpu", "-1"]) == 5
    assert main(["request", "--gpu", "2", "--gpus", "2"]) == 5
    assert main(["list", "--token", "gpp_wrong"]) == 3
    assert main(["list", "--retries", "0", "--url", f"http://127.0.0.1:{closed_port}"]) == 7

    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"api": "1/min"})
    cache.clear()
    assert main(["list"]) == 0
    assert main(["list", "--retries", "0"]) == 8


def test_usage_errors_exit_2(monkeypatch, capsys):
    monkeypatch.delenv("GPU_PORTAL_URL", raising=False)
    monkeypatch.delenv("GPU_PORTAL_TOKEN", raising=False)

    for argv in (["list"], ["frobnicate"], ["show", "--url", "http://x", "--token", "t", "--", "ls"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "No portal address: set GPU_PORTAL_URL and GPU_PORTAL_TOKEN" in err
    assert "gpu-portal login" in err and "--url and --token" in err


def test_prices_shows_each_priced_pool(as_user, member, pool, operator, capsys):
    set_pool_price(pool, "2.50", actor=operator)
    as_user(member)

    assert main(["prices"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["POOL", "GPU_MODEL", "CAPACITY", "USD_PER_GPU_HOUR"]
    assert row.split()[:4] == ["a100", "A100-80GB", "on-demand", "2.500000"]

    assert main(["prices", "--json"]) == 0
    (price,) = json.loads(capsys.readouterr().out)
    assert (price["pool"], price["usd_per_gpu_hour"], price["source"]) == ("a100", "2.500000", "set by ops")


def test_prices_says_not_offered_by_a_portal_without_a_price_catalog(as_user, member, live_server, capsys):
    as_user(member)

    assert main(["prices", "--url", f"{live_server.url}/older-portal"]) == 9
    assert "does not offer prices" in capsys.readouterr().err


def test_the_package_imports_no_django():
    check = "import gpu_portal_sdk, gpu_portal_sdk.cli, sys; assert 'django' not in sys.modules"

    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)


def test_python_m_gpu_portal_sdk_lists_as_a_script_would(
    live_server, transactional_db, token, member, team, cluster
):
    submit_request(user=member, team=team, name="seen", task_type="training", gpu_milli=250)
    argv = ["--url", live_server.url, "--token", token(member), "--json", "list"]

    done = subprocess.run(
        [sys.executable, "-m", "gpu_portal_sdk", *argv], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert [r["name"] for r in json.loads(done.stdout)] == ["seen"]


def test_request_takes_repeatable_env_options_and_show_prints_them(as_user, member, cluster, capsys):
    as_user(member)

    code = main(
        ["request", "--env", "LR=3e-4", "--env", "URL=http://x/?a=b", "--env", "EMPTY=", "--", "train"]
    )
    request = GpuRequest.objects.get()
    assert main(["show", str(request.pk)]) == 0

    assert code == 0
    assert request.environment == {"LR": "3e-4", "URL": "http://x/?a=b", "EMPTY": ""}
    assert "  env LR=3e-4\n  env URL=http://x/?a=b\n  env EMPTY=\n" in capsys.readouterr().out


def test_request_pinned_is_never_moved_to_make_room_and_says_so_in_json(as_user, member, cluster, capsys):
    as_user(member)

    assert main(["request", "--name", "stay", "--pinned", "--", "train"]) == 0
    assert main(["request", "--name", "may-move", "--", "train"]) == 0
    capsys.readouterr()

    assert dict(GpuRequest.objects.values_list("name", "pinned")) == {"stay": True, "may-move": False}
    assert main(["list", "--json"]) == 0
    listed = {r["name"]: r["pinned"] for r in json.loads(capsys.readouterr().out)}
    assert listed == {"stay": True, "may-move": False}


def test_an_env_option_without_a_name_is_a_usage_error(as_user, member, cluster, capsys):
    as_user(member)

    with pytest.raises(SystemExit) as exited:
        main(["request", "--env", "LR", "--", "train"])

    assert exited.value.code == 2
    assert "'LR': write NAME=VALUE" in capsys.readouterr().err
    assert not GpuRequest.objects.exists()


def test_a_reserved_env_name_is_refused_by_the_portal_with_exit_code_5(as_user, member, cluster, capsys):
    as_user(member)

    code = main(["request", "--env", "HOME=/root", "--", "train"])

    assert code == 5
    assert "HOME is reserved: the node agent sets it for every job" in capsys.readouterr().err
    assert not GpuRequest.objects.exists()
