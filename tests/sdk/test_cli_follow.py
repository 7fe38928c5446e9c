"""Following a job from a terminal, against the live portal: the SDK's logs() and follow_logs(), and
`gpu-portal logs [-f]`, `watch` and `quote`. Time is fake: each wait of the client moves the fake clock
and lets the test act as the world would meanwhile (the job writes, ends)."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from gpu_portal_sdk import ResourceManager, cli
from gpu_portal_sdk.cli import main

from billing_app.models import PoolPrice
from scheduler_app.choices import CapacityType
from scheduler_app.services.agents import append_log, report_finished, report_started
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request
from telemetry.services import record_gpu_samples


@pytest.fixture
def running(member, team, cluster):
    """A running quarter-card job of the member's team on node-1/gpu0 that has written one line."""
    request = submit_request(user=member, team=team, name="train", gpu_milli=250, command="python train.py")
    allocate(request, [Slice(cluster.gpus.get(index=0).pk, 250, 8192)])
    report_started(cluster, request.pk)
    append_log(cluster, request.pk, 0, "epoch 1\n")
    return request


@pytest.fixture
def fake_cli(monkeypatch, fake_time):
    """The CLI's client waits on the fake clock (`fake_time.on_sleep` acts meanwhile)."""

    def connect(url, token, args):
        return ResourceManager(url, token, sleep=fake_time.sleep, clock=fake_time.monotonic)

    monkeypatch.setattr(cli, "_connect", connect)


def script(fake_time, *steps):
    """Run one step at each wait of the client, in order; later waits do nothing."""
    pending = list(steps)
    fake_time.on_sleep = lambda: pending and pending.pop(0)()


def test_logs_reads_the_output_past_an_offset_with_the_requests_state(connect, member, running):
    portal = connect(member)

    whole, rest = portal.logs(running.pk), portal.logs(running.pk, after=6)

    assert (whole.text, whole.start, whole.end, whole.state, whole.ended) == (
        "epoch 1\n",
        0,
        8,
        "running",
        False,
    )
    assert (rest.text, rest.start) == ("1\n", 6)


def test_follow_logs_yields_what_exists_then_new_output_until_the_request_ends(
    connect, member, running, cluster, fake_time
):
    # given a job that writes a second line, then exits, while the client waits
    script(
        fake_time,
        lambda: append_log(cluster, running.pk, 8, "epoch 2\n"),
        lambda: (append_log(cluster, running.pk, 16, "done\n"), report_finished(cluster, running.pk, 0)),
    )

    # when its log is followed
    pieces = list(connect(member).follow_logs(running.pk, poll_s=3))

    # then every piece came once, in order, and the iterator stopped once it had ended and nothing came
    assert pieces == ["epoch 1\n", "epoch 2\n", "done\n"]
    assert fake_time.slept == [3, 3, 3]


def test_cli_logs_prints_the_output_so_far(as_user, member, running, capsys):
    as_user(member)

    assert main(["logs", str(running.pk)]) == 0
    assert capsys.readouterr().out == "epoch 1\n"


def test_cli_logs_follow_prints_new_output_until_the_job_ends_then_exits_0(
    as_user, member, running, cluster, fake_cli, fake_time, capsys
):
    # given a job that writes on, then exits
    as_user(member)
    script(
        fake_time,
        lambda: append_log(cluster, running.pk, 8, "epoch 2\n"),
        lambda: report_finished(cluster, running.pk, 0),
    )

    # when its log is followed
    code = main(["logs", "-f", str(running.pk)])

    # then all of it was printed as it came and the command ended with the job
    assert (code, capsys.readouterr().out) == (0, "epoch 1\nepoch 2\n")


def test_ctrl_c_while_following_exits_130_quietly(as_user, member, running, fake_cli, fake_time, capsys):
    # given a job that keeps running, and a user who presses Ctrl-C while the CLI waits
    as_user(member)

    def interrupt():
        raise KeyboardInterrupt

    script(fake_time, interrupt)

    # when its log is followed
    code = main(["logs", "--follow", str(running.pk)])

    # then it stops with 130 (128 + SIGINT) and no traceback
    out, err = capsys.readouterr()
    assert (code, out, err) == (130, "epoch 1\n", "")


def test_cli_watch_prints_state_changes_and_utilization_until_the_request_ends(
    as_user, member, running, cluster, fake_cli, fake_time, capsys
):
    # given a running job whose card reports, then which its user releases
    as_user(member)

    def card_reports():
        now = timezone.now()
        reading = {"uuid": "GPU-node-1-0", "gpu_util_percent": 63, "memory_used_mib": 8192}
        record_gpu_samples(cluster, now, [reading | {"power_mw": 250_000, "temperature_c": 60}], now=now)

    script(fake_time, card_reports, lambda: release_request(running, user=member))

    # when it is watched
    code = main(["watch", str(running.pk)])

    # then each state change, the utilization once read, and how it ended are printed, then it exits 0
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[-1] == f"Request {running.pk} is released."
    steps = [line.split(" ", 1)[1] for line in lines[:-1]]  # each after its time
    assert steps == [
        "pending by bob: submitted",
        "pending -> scheduled by scheduler: placed on node-1/gpu0",
        "scheduled -> running by node agent: process started",
        "util 63.0 %, memory 10.0 % on node-1/gpu0",
        "running -> released by bob: released by user",
    ]


def test_cli_quote_compares_on_demand_and_spot_for_a_shape(as_user, member, pool, capsys):
    # given an on-demand and a spot pool of the model, priced
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    since = timezone.now() - dt.timedelta(hours=1)
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=since)
    PoolPrice.objects.create(pool=spot, usd_per_gpu_hour=Decimal("1.00"), effective_from=since)
    as_user(member)

    # when half a card is quoted for two hours
    code = main(["quote", "--gpu-model", "A100-80GB", "--gpu", "0.5", "--max-duration", "7200"])

    # then both capacity types are priced per card-hour, per hour and over the two hours
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0] == "500 milli-GPU x 1 of A100-80GB over 2.0000 h:"
    rows = {line.split()[0]: line.split()[1:5] for line in lines[2:4]}
    assert {kind: (pool, *map(Decimal, usd)) for kind, (pool, *usd) in rows.items()} == {
        "on-demand": ("a100", Decimal(4), Decimal(2), Decimal(4)),
        "spot": ("a100-spot", Decimal(1), Decimal("0.5"), Decimal(1)),
    }
    assert lines[-1] == "Cheaper: spot."
