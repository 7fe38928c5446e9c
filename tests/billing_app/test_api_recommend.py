"""POST /api/v1/requests/recommend/: the model learns from the team's own finished runs of the same
workload; money as strings; bad input gets the error envelope."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing_app.services import set_pool_price
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_request
from telemetry.rollups import roll_up
from tests.telemetry.telemetry_helpers import plant

URL = "/api/v1/requests/recommend/"
COMMAND = "python train.py --epochs 3"


def finished_run(team, user, milli, seconds, command=COMMAND):
    """A succeeded run of `seconds` at `milli` (history only: it never held a card in this test)."""
    end = timezone.now() - dt.timedelta(hours=1)
    return GpuRequest.objects.create(
        team=team,
        user=user,
        name="train",
        gpu_milli=milli,
        command=command,
        state=RequestState.SUCCEEDED,
        started_at=end - dt.timedelta(seconds=seconds),
        ended_at=end,
    )


@pytest.fixture
def priced(pool, spot_pool, operator):
    set_pool_price(pool, "3.00", actor=operator)
    set_pool_price(spot_pool, "1.00", actor=operator)


def test_the_curve_is_fitted_to_the_workloads_finished_runs_and_the_cheapest_meeting_the_deadline_chosen(
    api_client, member, team, priced
):
    for milli, seconds in ((1000, 3600), (750, 4140), (500, 5760)):  # the field data: +15 %, +60 %
        finished_run(team, member, milli, seconds)
    finished_run(team, member, 250, 100, command="python other.py")  # another workload: ignored

    response = api_client(member).post(URL, {"command": COMMAND, "deadline_s": 4500}, format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["gpu_model"] == "A100-80GB"
    assert body["curve"]["source"] == "history"
    assert body["curve"]["t1_s"] == pytest.approx(3600, rel=0.01)
    at = {p["share"]: p["runtime_s"] for p in body["predictions"]}
    assert at[0.75] == pytest.approx(4140, rel=0.02) and at[0.5] == pytest.approx(5760, rel=0.02)
    chosen = body["chosen"]
    # Spot at $1: 0.75 (4140 s, upper band 4347 s) meets 4500 s and costs 0.75 x 1.15 h x $1 = $0.86.
    assert (chosen["gpu_milli"], chosen["capacity_type"], chosen["cost_usd"]) == (750, "spot", "0.86")
    assert any(o["pareto"] for o in body["options"])
    assert {o["capacity_type"] for o in body["options"]} == {"on-demand", "spot"}


def test_without_history_the_task_types_prior_scales_to_the_max_duration(api_client, member, priced):
    response = api_client(member).post(URL, {"task_type": "inference", "max_duration_s": 1800}, format="json")

    body = response.json()
    assert response.status_code == 200
    assert (body["curve"]["source"], body["curve"]["t1_s"]) == ("prior", 1800)


def test_another_teams_runs_are_not_learnt_from(api_client, outsider, team, member, priced):
    for milli, seconds in ((1000, 3600), (500, 5760)):
        finished_run(team, member, milli, seconds)

    response = api_client(outsider).post(URL, {"command": COMMAND}, format="json")

    assert response.status_code == 200
    assert response.json()["curve"]["source"] == "prior"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"budget_usd": 5}, "budget_usd"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"gpu_milli": 1001}, "gpu_milli"),
        ({"pool": "nowhere"}, "pool"),
        ({"team": "not-mine"}, "team"),
    ],
)
def test_bad_input_gets_the_error_envelope_naming_the_field(api_client, member, priced, payload, field):
    response = api_client(member).post(URL, payload, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_a_budget_too_small_chooses_nothing_and_says_so(api_client, member, priced):
    response = api_client(member).post(URL, {"budget_usd": "0.01", "max_duration_s": 3600}, format="json")

    body = response.json()
    assert body["chosen"] is None and "budget" in body["reason"]
    assert Decimal(body["cheapest"]["cost_usd"]) > Decimal("0.01")


def test_anonymous_is_refused(client):
    assert client.post(URL, {}, content_type="application/json").status_code in (401, 403)


def test_runs_with_the_workload_key_set_on_submit_are_learnt_from_whatever_their_command(
    api_client, member, team, priced
):
    for milli, seconds, lr in ((1000, 3600, 1), (500, 5760, 2)):
        run = finished_run(team, member, milli, seconds, command=f"python train.py --lr {lr}")
        GpuRequest.objects.filter(pk=run.pk).update(workload_key="resnet50")
    submitted = api_client(member).post(
        "/api/v1/requests/",
        {"name": "next", "gpu_milli": 250, "command": "python train.py --lr 3", "workload_key": "resnet50"},
        format="json",
    )
    assert submitted.status_code == 201 and submitted.json()["workload_key"] == "resnet50"

    body = api_client(member).post(URL, {"workload_key": "resnet50"}, format="json").json()

    assert body["curve"]["source"] == "history"
    assert body["curve"]["t1_s"] == pytest.approx(3600, rel=0.01)


def test_with_no_other_shares_known_the_measured_utilization_shapes_the_curve(
    api_client, member, team, make_node, priced
):
    now = timezone.now()
    node = make_node("node-1", gpus=1)
    job = submit_request(user=member, team=team, name="light", gpu_milli=1000, command="python light.py")
    allocate(job, [Slice(node.gpus.get().pk, 1000, 4096)])
    transition_request(job, RequestState.RUNNING)
    GpuRequest.objects.filter(pk=job.pk).update(started_at=now - dt.timedelta(hours=2))
    Allocation.objects.filter(request=job).update(started_at=now - dt.timedelta(hours=2))
    plant(node.gpus.get(), now - dt.timedelta(minutes=90), [30] * 90)  # a full card kept 30 % busy
    roll_up(now)

    body = (
        api_client(member)
        .post(URL, {"command": "python light.py", "max_duration_s": 3600}, format="json")
        .json()
    )

    assert body["curve"]["source"] == "utilization"
    at = {p["share"]: p["runtime_s"] for p in body["predictions"]}
    assert at[0.5] == pytest.approx(at[1.0])  # it loses nothing at half a card
    assert at[0.125] > at[0.25] > at[0.5]


def test_any_model_compares_every_priced_model_and_each_option_names_its_own(
    api_client, member, pool, spot_pool, operator
):
    rtx = create_pool(name="rtx", gpu_model="RTX-4090", capacity_type=CapacityType.ON_DEMAND)
    set_pool_price(pool, "3.00", actor=operator)
    set_pool_price(spot_pool, "1.00", actor=operator)
    set_pool_price(rtx, "0.50", actor=operator)

    body = api_client(member).post(URL, {"command": COMMAND, "gpu_model": ""}, format="json").json()

    assert body["gpu_model"] == ""  # several: each option says which
    kinds = {(o["gpu_model"], o["capacity_type"]) for o in body["options"]}
    assert kinds == {("A100-80GB", "on-demand"), ("A100-80GB", "spot"), ("RTX-4090", "on-demand")}
    assert body["chosen"]["gpu_model"] == "RTX-4090"  # the cheapest per GPU-hour, the same curve
    assert "RTX-4090" in body["reason"]


def test_one_model_answers_as_before_with_its_name_on_each_option(api_client, member, priced):
    body = api_client(member).post(URL, {"command": COMMAND, "gpu_model": "A100-80GB"}, format="json").json()

    assert body["gpu_model"] == "A100-80GB"
    assert {o["gpu_model"] for o in body["options"]} == {"A100-80GB"}
    assert "A100-80GB" not in body["reason"]
