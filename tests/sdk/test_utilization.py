"""get_utilization and `gpu-portal utilization` against the live portal; the samples arrive through the
real ingest endpoint with a node's agent credential, as the node agent will send them."""

import datetime as dt
import json

import pytest
import requests
import time_machine
from django.utils import timezone
from gpu_portal_sdk import GpuSample, NotFoundError, Utilization
from gpu_portal_sdk.cli import NOT_FOUND, main
from gpu_portal_sdk.output import UTILIZATION_COLUMNS

from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request


def place_ago(request, cluster, seconds):
    """Place `request` on node-1/gpu0 (half of it) as a pass did `seconds` ago."""
    with time_machine.travel(timezone.now() - dt.timedelta(seconds=seconds), tick=False):
        allocate(request, [Slice(cluster.gpus.get(index=0).id, 500, 8192)])
    return request


@pytest.fixture
def placed(member, team, cluster):
    """A half-card request of the member's team on node-1/gpu0, placed five minutes ago."""
    return place_ago(submit_request(user=member, team=team, name="train", gpu_milli=500), cluster, 300)


@pytest.fixture
def agent_posts(live_server, cluster):
    """agent_posts(utils, seconds_apart) -> node-1's agent posts one batch per util for gpu0, ending now."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {issue_agent_credential(cluster)}"

    def post(utils, seconds_apart=10):
        now = timezone.now()
        for k, util in enumerate(utils):
            at = now - dt.timedelta(seconds=seconds_apart * (len(utils) - 1 - k))
            body = {
                "sampled_at": at.isoformat(),
                "gpus": [
                    {
                        "uuid": "GPU-node-1-0",
                        "gpu_util_percent": util,
                        "memory_used_mib": 30_000 + k,
                        "power_mw": 301_500,
                        "temperature_c": 66,
                    }
                ],
            }
            response = session.post(f"{live_server.url}/api/v1/agent/samples/", json=body, timeout=10)
            assert response.status_code == 200, response.text

    return post


def test_get_utilization_returns_typed_readings(connect, member, placed, agent_posts):
    agent_posts([60, 70, 80, 70])

    usage = connect(member).get_utilization(placed.id)

    assert isinstance(usage, Utilization)
    assert (usage.request_id, usage.state) == (placed.id, "scheduled")
    assert 299 <= usage.window_s <= 302  # its slice's five minutes so far
    (card,) = usage.gpus
    assert (card.node, card.gpu_index, card.gpu_uuid, card.milli) == ("node-1", 0, "GPU-node-1-0", 500)
    assert isinstance(card.latest, GpuSample)
    assert (card.latest.gpu_util_percent, card.latest.memory_used_mib, card.latest.power_w) == (
        70,
        30_003,
        301.5,
    )
    assert card.latest.sampled_at.tzinfo is not None
    assert (card.summary.samples, card.summary.mean_util_percent, card.summary.util_stddev_percent) == (
        4,
        70.0,
        7.1,
    )
    assert card.summary.util_steady is True
    assert sum(p.samples for p in card.series) == 4 and len(card.series) <= 60
    assert card.memory_mib == 81920
    # Now: the one card's readings of the last minute, util 60..80 and memory 30,000..30,003 MiB.
    assert (usage.gpu_util, usage.cards_read, usage.current_window_s) == (70.0, 1, 60)
    assert usage.mem_util == round(100 * 30_001.5 / 81920, 1) == 36.6


def test_without_recent_readings_gpu_util_and_mem_util_are_none(connect, member, placed):
    usage = connect(member).get_utilization(placed.id)

    assert (usage.gpu_util, usage.mem_util, usage.cards_read) == (None, None, 0)


def test_get_utilization_of_another_teams_request_is_not_found(connect, outsider, placed):
    with pytest.raises(NotFoundError):
        connect(outsider).get_utilization(placed.id)


@pytest.fixture
def as_member(live_server, token, member, monkeypatch):
    monkeypatch.setenv("GPU_PORTAL_URL", live_server.url)
    monkeypatch.setenv("GPU_PORTAL_TOKEN", token(member))


def test_cli_shows_a_table_and_json(as_member, placed, agent_posts, capsys):
    agent_posts([10, 90])

    assert main(["utilization", str(placed.id)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"Request {placed.id} scheduled: readings over 5 min from ")
    assert lines[1].split() == UTILIZATION_COLUMNS
    row = lines[2].split()
    assert row[:6] == ["node-1/gpu0", "500", "90", "30001", "301.5", "66"]
    assert row[-6:] == ["50.0", "40.0", "2", "5", "min", "held"]
    assert lines[3] == "Now: util 50.0 %, memory 36.6 % (mean of 1 of 1 cards over the last 60 s)."

    assert main(["utilization", str(placed.id), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"][0]["summary"]["util_steady"] is False
    assert data["gpus"][0]["latest"]["power_mw"] == 301_500


def test_cli_without_samples_shows_dashes(as_member, placed, capsys):
    assert main(["utilization", str(placed.id)]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == [
        "node-1/gpu0",
        "500",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        "0",
        "5",
        "min",
        "held",
    ]
    assert lines[3] == "Now: no card read in the last 60 s."


def test_cli_counts_only_the_readings_since_a_young_requests_slice_began(
    as_member, member, team, cluster, agent_posts, capsys
):
    # given a card read every 10 s for the last 90 s, and a request placed on it 35 s ago
    agent_posts([40] * 10)
    young = place_ago(submit_request(user=member, team=team, name="young", gpu_milli=500), cluster, 35)

    # when its utilization is shown
    assert main(["utilization", str(young.pk)]) == 0

    # then it covers the slice's own 35 s and the 3 or 4 readings within them, not the card's 15 minutes
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"Request {young.pk} scheduled: readings over 3")
    assert " s from " in lines[0]
    assert lines[2].split()[-4] in {"3", "4"}  # SAMPLES, before OVER ("35 s") and ENDED


def test_cli_exit_code_for_a_request_it_cannot_see(as_member, outsider, other_team, cluster, capsys):
    theirs = submit_request(user=outsider, team=other_team, name="secret", gpu_milli=250)

    assert main(["utilization", str(theirs.pk)]) == NOT_FOUND
    assert "gpu-portal:" in capsys.readouterr().err
