"""POST /api/v1/agent/samples/ (node credentials only) and GET /api/v1/requests/{id}/utilization/
(the request's team only), in the API's one error format."""

import datetime as dt
from types import SimpleNamespace

import pytest
import time_machine
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler_app.api.permissions import IsNodeAgent
from scheduler_app.models import Node
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request
from scheduler_app.services.transitions import transition_request
from telemetry.models import GpuSample
from telemetry.services import record_gpu_samples

INGEST = "/api/v1/agent/samples/"


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2)


@pytest.fixture
def agent(node):
    """A DRF client holding node-1's agent credential."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(node)}")
    return client


def batch(*utils, at=None, node_name="node-1"):
    return {
        "sampled_at": (at or timezone.now()).isoformat(),
        "gpus": [
            {
                "uuid": f"GPU-{node_name}-{i}",
                "gpu_util_percent": util,
                "memory_used_mib": 4096,
                "power_mw": 275_000,
                "temperature_c": 64,
            }
            for i, util in enumerate(utils)
        ],
    }


def test_a_node_credential_posts_samples_and_heartbeats(agent, node):
    response = agent.post(INGEST, batch(55, 12), format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == {"accepted": 2, "node": "node-1", "node_status": "ready"}
    assert sorted(GpuSample.objects.values_list("gpu_util_percent", flat=True)) == [12, 55]
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None


def test_the_same_batch_twice_is_stored_once(agent):
    body = batch(30, 40)

    first = agent.post(INGEST, body, format="json")
    second = agent.post(INGEST, body, format="json")

    assert (first.status_code, second.status_code) == (200, 200)
    assert GpuSample.objects.count() == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["gpus"][1].update(uuid="GPU-elsewhere"), "gpus[1].uuid"),
        (lambda b: b["gpus"][1].update(gpu_util_percent="half"), "gpus[1].gpu_util_percent"),
        (lambda b: b["gpus"][0].update(power_mw=-1), "gpus[0].power_mw"),
        (lambda b: b["gpus"][0].pop("temperature_c"), "gpus[0].temperature_c"),
        (lambda b: b.update(sampled_at="2025-01-31T12:00:00"), "sampled_at"),
        (lambda b: b.update(sampled_at="yesterday"), "sampled_at"),
        (lambda b: b.update(sampled_at="2001-01-01T00:00:00Z"), "sampled_at"),
        (lambda b: b.update(gpus="all"), "gpus"),
        (lambda b: b["gpus"].append(b["gpus"][0]), "gpus[2].uuid"),
    ],
)
def test_a_bad_batch_is_a_400_naming_the_place_and_writes_nothing(agent, node, change, field):
    body = batch(10, 20)
    change(body)

    response = agent.post(INGEST, body, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["fields"], error
    assert error["message"].startswith(field)
    assert not GpuSample.objects.exists()
    node.refresh_from_db()
    assert node.last_heartbeat_at is None


def test_another_nodes_credential_cannot_post_for_this_nodes_cards(make_node, node):
    other = make_node("node-2", gpus=1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(other)}")

    response = client.post(INGEST, batch(10), format="json")

    assert response.status_code == 400
    assert "not a card of node node-2" in response.json()["error"]["fields"]["gpus[0].uuid"][0]
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize("who", ["nobody", "user_token", "session", "old_credential", "garbage"])
def test_only_a_current_node_credential_may_post(api_client, client, member, node, who):
    if who == "nobody":
        response = APIClient().post(INGEST, batch(10), format="json")
    elif who == "user_token":
        response = api_client(member).post(INGEST, batch(10), format="json")
    elif who == "session":
        client.force_login(member)
        response = client.post(INGEST, batch(10), content_type="application/json")
    else:
        stale = APIClient()
        secret = issue_agent_credential(node) if who == "old_credential" else "node_made-up"
        issue_agent_credential(node)  # rotating the credential revokes the old one
        stale.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        response = stale.post(INGEST, batch(10), format="json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["code"] in {"not_authenticated", "authentication_failed"}
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/v1/requests/"),
        ("get", "/api/v1/requests/{id}/"),
        ("get", "/api/v1/requests/{id}/utilization/"),
        ("post", "/api/v1/requests/{id}/cancel/"),
        ("get", "/api/v1/cluster/"),
        ("get", "/api/v1/teams/"),
        ("get", "/api/v1/tokens/"),
    ],
)
def test_a_node_credential_can_do_nothing_else(agent, member, team, node, method, url):
    request = submit_request(user=member, team=team, name="train", gpu_milli=250)

    response = getattr(agent, method)(url.format(id=request.pk))

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
    request.refresh_from_db()
    assert request.state == "pending"


def test_an_agent_cannot_read_samples_back(agent):
    assert agent.get(INGEST).status_code == 405


# Utilization


def placed_ago(request, node, cards, *, minutes):
    """Place `request` on `cards` of `node` (1000 milli each) as a pass did `minutes` ago."""
    with time_machine.travel(timezone.now() - dt.timedelta(minutes=minutes), tick=False):
        allocate(request, [Slice(gpu.id, 1000, 8192) for gpu in node.gpus.order_by("index")[:cards]])
    return request


@pytest.fixture
def running(member, team, node):
    """A 2-card request of the member's team, placed on node-1 half an hour ago, 1000 milli on each card."""
    request = submit_request(user=member, team=team, name="ddp", gpu_milli=1000, num_gpus=2)
    return placed_ago(request, node, 2, minutes=30)


def post_samples(node, utils_per_card, *, seconds_apart=15, count=80):
    """`count` batches ending now, `seconds_apart` apart; card i gets utils_per_card[i](k)."""
    now = timezone.now()
    for k in range(count):
        at = now - dt.timedelta(seconds=seconds_apart * (count - 1 - k))
        readings = [
            {
                "uuid": f"GPU-{node.name}-{i}",
                "gpu_util_percent": util(k),
                "memory_used_mib": 1000 + k,
                "power_mw": 200_000,
                "temperature_c": 60,
            }
            for i, util in enumerate(utils_per_card)
        ]
        record_gpu_samples(node, at, readings, now=now)


@pytest.mark.parametrize("who", ["member", "team_admin"])
def test_the_team_reads_each_cards_latest_sample_series_and_summary(api_client, request, running, node, who):
    post_samples(node, [lambda k: 70 + (k % 2) * 10, lambda k: 0 if k % 2 else 100], count=80)

    response = api_client(request.getfixturevalue(who)).get(f"/api/v1/requests/{running.pk}/utilization/")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["request_id"], body["state"], body["window_s"]) == (running.pk, "scheduled", 900)
    steady, bursty = body["gpus"]
    assert (steady["node"], steady["gpu_index"], steady["gpu_uuid"], steady["milli"]) == (
        "node-1",
        0,
        "GPU-node-1-0",
        1000,
    )
    assert (steady["latest"]["gpu_util_percent"], steady["latest"]["memory_used_mib"]) == (80, 1079)
    # 80 samples 15 s apart span 20 minutes: the last 15 minutes hold 60 or 61 of them.
    assert steady["summary"]["samples"] in {60, 61}
    assert 74 <= steady["summary"]["mean_util_percent"] <= 76
    assert (steady["summary"]["util_stddev_percent"], steady["summary"]["util_steady"]) == (5.0, True)
    assert (bursty["summary"]["util_stddev_percent"], bursty["summary"]["util_steady"]) == (50.0, False)
    assert 1 <= len(steady["series"]) <= 60
    assert sum(p["samples"] for p in steady["series"]) == steady["summary"]["samples"]


def test_current_load_is_the_mean_over_the_cards_of_the_last_minute(api_client, member, running, node):
    card0, card1 = (f"GPU-node-1-{i}" for i in range(2))
    now = timezone.now()

    def read(at, util0, mem0, util1, mem1):
        readings = [
            {"uuid": uuid, "gpu_util_percent": u, "memory_used_mib": m, "power_mw": 1, "temperature_c": 50}
            for uuid, u, m in ((card0, util0, mem0), (card1, util1, mem1))
        ]
        record_gpu_samples(node, at, readings, now=now)

    read(now - dt.timedelta(minutes=5), 0, 81920, 0, 81920)  # outside the last minute: left out
    read(now - dt.timedelta(seconds=20), 70, 40960, 10, 8192)
    read(now, 90, 40960, 30, 8192)

    body = api_client(member).get(f"/api/v1/requests/{running.pk}/utilization/").json()

    assert [g["memory_mib"] for g in body["gpus"]] == [81920, 81920]
    # card 0: util 80, memory 50 %; card 1: util 20, memory 10 %.
    assert body["current"] == {
        "window_s": 60,
        "cards_read": 2,
        "gpu_util_percent": 50.0,
        "mem_util_percent": 30.0,
    }


def test_a_card_without_samples_has_no_latest_and_an_empty_series(api_client, member, running):
    body = api_client(member).get(f"/api/v1/requests/{running.pk}/utilization/").json()

    assert body["current"] == {
        "window_s": 60,
        "cards_read": 0,
        "gpu_util_percent": None,
        "mem_util_percent": None,
    }

    assert [(g["latest"], g["series"], g["summary"]["samples"]) for g in body["gpus"]] == [
        (None, [], 0),
        (None, [], 0),
    ]
    assert body["gpus"][0]["summary"]["mean_util_percent"] is None


def test_a_requests_utilization_starts_when_its_slice_did_never_before(api_client, member, team, node):
    # given a card read every 15 s for 20 minutes, and a request placed on it 45 s ago
    post_samples(node, [lambda k: 90, lambda k: 90], count=80)
    request = placed_ago(
        submit_request(user=member, team=team, name="young", gpu_milli=1000), node, 1, minutes=0.75
    )

    # when its utilization is read
    body = api_client(member).get(f"/api/v1/requests/{request.pk}/utilization/").json()

    # then only the readings since its slice began count (3 or 4 of them, 15 s apart), over those 45 s
    (card,) = body["gpus"]
    allocation = request.allocations.get()
    assert (
        card["window_start"] == card["started_at"] == allocation.started_at.isoformat().replace("+00:00", "Z")
    )
    assert 44 <= card["window_s"] <= 47 and 44 <= body["window_s"] <= 47
    assert card["summary"]["samples"] in {3, 4}
    assert sum(p["samples"] for p in card["series"]) == card["summary"]["samples"]
    assert all(p["at"] >= card["started_at"] for p in card["series"])


def test_a_finished_requests_utilization_is_its_slices_own_time_range(api_client, member, team, node):
    # given a request that ran for 10 minutes, ended 5 minutes ago, its card read throughout and since
    request = placed_ago(
        submit_request(user=member, team=team, name="done", gpu_milli=1000), node, 1, minutes=15
    )
    transition_request(request, "running", actor_name="agent")
    with time_machine.travel(timezone.now() - dt.timedelta(minutes=5), tick=False):
        release_request(request, user=member)
    post_samples(node, [lambda k: 50 if k < 60 else 5, lambda k: 0], count=80)  # 20 minutes, 15 s apart

    # when its utilization is read after it ended
    body = api_client(member).get(f"/api/v1/requests/{request.pk}/utilization/").json()

    # then its card is there with the readings of its own 10 minutes only
    (card,) = body["gpus"]
    segment = request.allocations.get()
    assert (card["started_at"], card["ended_at"]) == tuple(
        t.isoformat().replace("+00:00", "Z") for t in (segment.started_at, segment.ended_at)
    )
    assert card["window_s"] == 600 and card["summary"]["samples"] in {40, 41}
    assert card["summary"]["mean_util_percent"] == 50.0  # the 5 % after it ended are not its
    assert card["latest"]["sampled_at"] <= card["ended_at"]
    assert body["current"]["cards_read"] == 0  # it holds no card now


def test_a_pending_request_holds_no_card(api_client, member, team, node):
    request = submit_request(user=member, team=team, name="waiting", gpu_milli=250)

    body = api_client(member).get(f"/api/v1/requests/{request.pk}/utilization/").json()

    assert (body["state"], body["gpus"]) == ("pending", [])


def test_an_outsider_gets_404_and_anonymous_401(api_client, outsider, running):
    url = f"/api/v1/requests/{running.pk}/utilization/"

    hidden = api_client(outsider).get(url)
    anonymous = api_client().get(url)

    assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "not_found")
    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "not_authenticated")


def test_utilization_takes_a_bounded_number_of_queries(
    api_client, member, team, make_node, django_assert_max_num_queries
):
    big = make_node("node-big", gpus=8)
    request = placed_ago(
        submit_request(user=member, team=team, name="wide", gpu_milli=1000, num_gpus=8), big, 8, minutes=30
    )
    post_samples(big, [lambda k: k % 100] * 8, seconds_apart=5, count=200)
    client = api_client(member)

    with django_assert_max_num_queries(7):
        response = client.get(f"/api/v1/requests/{request.pk}/utilization/")

    assert response.status_code == 200
    assert len(response.json()["gpus"]) == 8
    assert all(len(g["series"]) == 60 for g in response.json()["gpus"])


def test_the_schema_documents_both_endpoints(api_client, member):
    schema = api_client(member).get("/api/v1/schema/?format=json").json()

    ingest = schema["paths"][INGEST]["post"]
    assert ingest["security"] == [{"nodeCredential": []}]
    assert {"200", "400", "401", "403"} <= set(ingest["responses"])
    assert "get" in schema["paths"]["/api/v1/requests/{id}/utilization/"]
    assert Node.objects.count() == 0  # reading the schema touches no data


def test_the_ingest_permission_takes_a_node_and_nothing_else(member, node):
    allowed = IsNodeAgent()

    assert allowed.has_permission(SimpleNamespace(user=AnonymousUser(), auth=node), view=None)
    assert not allowed.has_permission(SimpleNamespace(user=member, auth="gpp_secret"), view=None)
    assert not allowed.has_permission(SimpleNamespace(user=member, auth=None), view=None)
