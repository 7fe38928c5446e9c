"""Telemetry over a range for a card, a request, a team and a pool: the resolution the range calls for,
a request's cards only while it held them, shares for teams and pools, and each team's data its own."""

import datetime as dt

import pytest
import time_machine
from django.utils import timezone

from scheduler_app.models import Allocation
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_requests
from telemetry.rollups import HOUR_S, MINUTE_S, roll_up
from telemetry.selectors import RAW, pool_series, request_series, resolution_for, team_series
from tests.telemetry.telemetry_helpers import plant

NOW = dt.datetime(2025, 3, 1, 12, 0, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "ago, span, expected",
    [
        (dt.timedelta(minutes=20), dt.timedelta(minutes=15), RAW),
        (dt.timedelta(hours=6), dt.timedelta(minutes=15), MINUTE_S),  # raw data is gone by then
        (dt.timedelta(hours=6), dt.timedelta(hours=6), MINUTE_S),
        (dt.timedelta(days=3), dt.timedelta(days=3), HOUR_S),
        (dt.timedelta(days=20), dt.timedelta(hours=1), HOUR_S),  # minutes are kept 14 days
    ],
)
def test_the_range_picks_the_resolution(ago, span, expected):
    start = NOW - ago
    assert resolution_for(start, start + span, NOW) == expected


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2)


@pytest.fixture
def shared(node, member, team, outsider, other_team):
    """Card 0: 500 milli for the team's "ours" since 11:30, 500 for the other team's "theirs"; card 1 free.

    Card 0 runs at 80 % from 11:00 (before "ours" started), card 1 at 20 %; both one sample a minute."""
    ours = submit_request(user=member, team=team, name="ours", gpu_milli=500)
    theirs = submit_request(user=outsider, team=other_team, name="theirs", gpu_milli=500)
    card0, card1 = node.gpus.order_by("index")
    allocate(ours, [Slice(card0.pk, 500, 8192)])
    allocate(theirs, [Slice(card0.pk, 500, 8192)])
    Allocation.objects.filter(request=ours).update(started_at=NOW - dt.timedelta(minutes=30, seconds=30))
    Allocation.objects.filter(request=theirs).update(started_at=NOW - dt.timedelta(hours=2))
    plant(card0, NOW - dt.timedelta(hours=1), [80] * 60, memory=40_000)
    plant(card1, NOW - dt.timedelta(hours=1), [20] * 60, memory=10_000)
    return {"ours": ours, "theirs": theirs}


@pytest.fixture
def rolled(settings, shared):
    settings.TELEMETRY_ROLLUP_LOOKBACK_S = 3 * 3600
    roll_up(NOW)
    return shared


def test_a_request_sees_its_card_only_while_it_held_it(shared):
    resolution, cards = request_series(shared["ours"], NOW - dt.timedelta(minutes=29), NOW, now=NOW)

    assert resolution == RAW
    (card,) = cards
    assert card.segment.gpu.uuid == "GPU-node-1-0"
    assert {p.util_mean for p in card.points} == {80.0}
    assert len(card.points) == 29


def test_a_requests_minute_points_start_with_its_segment(rolled):
    resolution, (card,) = request_series(rolled["ours"], NOW - dt.timedelta(hours=2), NOW, now=NOW)

    assert resolution == MINUTE_S
    assert card.points[0].at == dt.datetime(2025, 3, 1, 11, 30, tzinfo=dt.UTC)  # it started at 11:30:00
    assert card.points[-1].at == dt.datetime(2025, 3, 1, 11, 59, tzinfo=dt.UTC)
    assert (card.points[0].samples, card.points[0].util_stddev, card.points[0].memory_mean_mib) == (
        1,
        0.0,
        40_000,
    )


def test_a_team_counts_its_share_of_each_card(rolled, team, other_team):
    resolution, points = team_series(team, NOW - dt.timedelta(hours=2), NOW, now=NOW)

    assert resolution == MINUTE_S
    assert len(points) == 30  # 11:30 .. 11:59
    last = points[-1]
    assert (last.cards, last.held_gpus, last.busy_gpus, last.util_percent, last.memory_used_mib) == (
        1,
        0.5,
        0.4,
        80.0,
        20_000,
    )
    _, theirs = team_series(other_team, NOW - dt.timedelta(hours=2), NOW, now=NOW)
    assert len(theirs) == 60  # held the card the whole hour it reported


def test_a_requests_telemetry_covers_its_own_time_range_when_none_is_asked(api_client, member, rolled):
    # given "ours" held card 0 from 11:30 to 11:45, the card read every minute from 11:00 to 12:00
    ended = NOW - dt.timedelta(minutes=15, seconds=30)
    transition_requests([rolled["ours"].pk], "cancelled", from_states=["scheduled"], now=ended)

    # when its telemetry is asked for with no range, a quarter of an hour after it ended
    client = api_client(member)
    with time_machine.travel(NOW, tick=False):
        body = client.get(f"/api/v1/requests/{rolled['ours'].pk}/telemetry/").json()

    # then the range is its slice's, and so are the points: none from before it began or after it ended
    assert (body["start"], body["end"]) == ("2025-03-01T11:30:00Z", "2025-03-01T11:45:00Z")
    (card,) = body["cards"]
    assert card["allocation"] == rolled["ours"].allocations.get().pk
    minutes = [p["at"][11:16] for p in card["points"]]
    assert (minutes[0], minutes[-1], len(minutes)) == ("11:30", "11:44", 15)


def test_api_ranges_are_checked(api_client, member, shared):
    client = api_client(member)
    url = f"/api/v1/requests/{shared['ours'].pk}/telemetry/"

    backwards = client.get(url, {"start": "2025-03-01T12:00:00Z", "end": "2025-03-01T11:00:00Z"})
    naive = client.get(url, {"start": "2025-03-01T11:00:00"})
    too_long = client.get(url, {"start": "2020-01-01T00:00:00Z", "end": "2025-03-01T00:00:00Z"})

    for response in (backwards, naive, too_long):
        assert response.status_code == 400
        assert "start" in response.json()["error"]["fields"]


def test_the_api_answers_each_scope_to_whom_may_see_it(
    api_client, member, outsider, operator, team, shared, node
):
    now = timezone.now()
    plant(node.gpus.get(index=0), now - dt.timedelta(minutes=5), [55] * 5)
    ours, gpu = shared["ours"], node.gpus.get(index=0)
    urls = {
        "request": f"/api/v1/requests/{ours.pk}/telemetry/",
        "team": f"/api/v1/teams/{team.slug}/telemetry/",
        "pool": f"/api/v1/pools/{node.pool.name}/telemetry/",
        "gpu": f"/api/v1/gpus/{gpu.pk}/telemetry/",
    }
    expected = {
        "member": {"request": 200, "team": 200, "pool": 200, "gpu": 403},
        "outsider": {"request": 404, "team": 404, "pool": 200, "gpu": 403},
        "operator": {"request": 200, "team": 200, "pool": 200, "gpu": 200},
    }
    users = {"member": member, "outsider": outsider, "operator": operator}
    for who, codes in expected.items():
        client = api_client(users[who])
        assert {scope: client.get(url).status_code for scope, url in urls.items()} == codes, who

    body = (
        api_client(member)
        .get(urls["request"], {"start": (now - dt.timedelta(minutes=10)).isoformat()})
        .json()
    )
    assert body["resolution_s"] == 1
    (card,) = body["cards"]
    assert (card["gpu_uuid"], card["milli"]) == ("GPU-node-1-0", 500)
    assert [p["util_mean"] for p in card["points"]] == [55.0] * 5
    gpu_body = (
        api_client(operator).get(urls["gpu"], {"start": (now - dt.timedelta(minutes=10)).isoformat()}).json()
    )
    assert len(gpu_body["points"]) == 5


def test_a_pool_counts_every_card_that_reported(rolled, node):
    resolution, points = pool_series(node.pool, NOW - dt.timedelta(hours=2), NOW, now=NOW)

    assert resolution == MINUTE_S
    assert len(points) == 60
    last = points[-1]
    assert (last.cards, last.held_gpus, last.busy_gpus, last.util_percent, last.memory_used_mib) == (
        2,
        2.0,
        1.0,
        50.0,
        50_000,
    )
