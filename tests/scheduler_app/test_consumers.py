"""The live streams: who may connect, what each one receives, and what a bad client frame gets."""

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from portal.routing import websocket_urlpatterns
from scheduler_app.live.consumers import FORBIDDEN, UNAUTHENTICATED
from scheduler_app.live.ticker import tick
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import release_request, submit_request
from telemetry.models import GpuSample

pytestmark = pytest.mark.django_db(transaction=True)

TEAM_STREAM = "/ws/teams/vision/events/"
CLUSTER_STREAM = "/ws/cluster/"


def connect(user, path=TEAM_STREAM):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    return communicator


def connection_result(user, path):
    async def scenario():
        socket = connect(user, path)
        connected, code = await socket.connect()
        # Refused or not, the socket is closed and the consumer let finish before the loop ends: a
        # consumer still running then is cancelled mid-way through the channel layer's receive.
        await socket.disconnect()
        return connected, code

    return async_to_sync(scenario)()


def frames_after(user, work, path=TEAM_STREAM):
    """Connect, take the snapshot, run `work` (ORM calls) and return every frame sent until a quiet second."""

    async def scenario():
        socket = connect(user, path)
        await socket.connect()
        await socket.receive_json_from(timeout=5)
        await database_sync_to_async(work)()
        frames = []
        while not await socket.receive_nothing(timeout=1):
            frames.append(await socket.receive_json_from(timeout=1))
        await socket.disconnect()
        return frames

    return async_to_sync(scenario)()


@pytest.fixture
def running(team, member, outsider, other_team, make_node):
    """One request of ours and one of the other team's, each placed on its own card, both read at 40 %."""
    node = make_node(gpus=2)
    ours = submit_request(user=member, team=team, name="ours", task_type="training", gpu_milli=1000)
    theirs = submit_request(
        user=outsider, team=other_team, name="theirs", task_type="training", gpu_milli=1000
    )
    run_scheduling_pass()
    read_cards(node, 40)
    return ours, theirs


def read_cards(node, util, at=None):
    at = at or timezone.now()
    for gpu in node.gpus.all():
        GpuSample.objects.create(
            gpu=gpu, sampled_at=at, gpu_util_percent=util, memory_used_mib=1000, power_mw=1, temperature_c=40
        )


@pytest.mark.parametrize(
    ("who", "path", "code"),
    [
        ("anonymous", TEAM_STREAM, UNAUTHENTICATED),
        ("outsider", TEAM_STREAM, FORBIDDEN),
        ("operator", TEAM_STREAM, FORBIDDEN),  # operators use the cluster-wide stream
        ("anonymous", CLUSTER_STREAM, UNAUTHENTICATED),
        ("member", CLUSTER_STREAM, FORBIDDEN),
        ("team_admin", CLUSTER_STREAM, FORBIDDEN),
    ],
)
def test_anonymous_foreign_and_non_staff_sockets_are_refused(team, request, who, path, code):
    user = AnonymousUser() if who == "anonymous" else request.getfixturevalue(who)

    assert connection_result(user, path) == (False, code)


@pytest.mark.parametrize(("who", "path"), [("member", TEAM_STREAM), ("operator", CLUSTER_STREAM)])
def test_members_and_operators_are_let_in(team, request, who, path):
    assert connection_result(request.getfixturevalue(who), path) == (True, None)


def test_member_receives_their_teams_request_events(team, member):
    async def scenario():
        socket = connect(member)
        await socket.connect()
        await socket.receive_json_from(timeout=5)  # the snapshot
        await database_sync_to_async(submit_request)(
            user=member, team=team, name="live", task_type="training", gpu_milli=125
        )
        message = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return message

    message = async_to_sync(scenario)()

    assert (message["type"], message["object"], message["to"], message["actor"]) == (
        "event",
        "gpurequest",
        "pending",
        "bob",
    )


def submit_theirs(outsider, other_team):
    return lambda: submit_request(
        user=outsider, team=other_team, name="secret", task_type="training", gpu_milli=125
    )


def test_member_never_receives_another_teams_events(team, member, outsider, other_team):
    assert frames_after(member, submit_theirs(outsider, other_team)) == []


def test_operator_receives_every_teams_events(team, operator, outsider, other_team):
    (message,) = frames_after(operator, submit_theirs(outsider, other_team), CLUSTER_STREAM)

    assert (message["type"], message["to"], message["actor"]) == ("event", "pending", "mallory")


def test_member_tick_has_cards_pools_and_only_their_teams_allocations(running, member):
    ours, theirs = running

    (frame,) = frames_after(member, tick)

    assert frame["type"] == "tick" and frame["at"]
    assert sorted(frame["gpus"].values()) == [40, 40]
    assert frame["pools"] == {"a100": {"util": 40.0, "free_milli": 0}}
    assert [a["request"] for a in frame["allocations"].values()] == [ours.pk]
    (entry,) = frame["allocations"].values()
    card = ours.allocations.get().gpu
    assert (entry["util"], entry["mem"]) == (40, round(100 * 1000 / card.memory_mib, 1))  # its card's
    assert "theirs" not in str(frame) and theirs.pk not in [
        a["request"] for a in frame["allocations"].values()
    ]


def test_second_tick_sends_only_what_changed(running, member):
    ours, _ = running
    tick()
    card = ours.allocations.get().gpu
    later = timezone.now() + dt.timedelta(seconds=1)

    def one_card_moves_and_two_ticks():
        GpuSample.objects.create(
            gpu=card, sampled_at=later, gpu_util_percent=90, memory_used_mib=1, power_mw=1, temperature_c=40
        )
        tick(later)
        return tick(later)

    (frame,) = frames_after(member, one_card_moves_and_two_ticks)

    assert frame["gpus"] == {str(card.pk): 90}  # the other card stayed at 40: not sent
    assert frame["pools"] == {"a100": {"util": 65.0, "free_milli": 0}}
    assert [(a["gpu"], a["util"]) for a in frame["allocations"].values()] == [(card.pk, 90)]
    assert tick(later) == {"gpus": 0, "allocations": 0, "pools": 0}  # nothing changed: nothing sent


def test_a_card_moving_under_another_teams_work_reaches_the_member_without_allocations(running, member):
    _, theirs = running
    tick()
    card = theirs.allocations.get().gpu
    later = timezone.now() + dt.timedelta(seconds=1)

    def their_card_moves():
        GpuSample.objects.create(
            gpu=card, sampled_at=later, gpu_util_percent=5, memory_used_mib=1, power_mw=1, temperature_c=40
        )
        tick(later)

    (frame,) = frames_after(member, their_card_moves)

    assert frame["gpus"] == {str(card.pk): 5}
    assert "allocations" not in frame


def test_snapshot_on_connect_is_scoped_to_the_members_teams(running, member, operator):
    ours, theirs = running
    tick()

    async def first_frame(user, path):
        socket = connect(user, path)
        await socket.connect()
        frame = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return frame

    mine = async_to_sync(first_frame)(member, TEAM_STREAM)
    everyone = async_to_sync(first_frame)(operator, CLUSTER_STREAM)

    assert mine["type"] == everyone["type"] == "snapshot"
    assert len(mine["gpus"]) == 2 and mine["pools"]["a100"]["util"] == 40.0
    assert [a["request"] for a in mine["allocations"].values()] == [ours.pk]
    assert sorted(a["request"] for a in everyone["allocations"].values()) == sorted([ours.pk, theirs.pk])
    assert all("team" not in a for a in everyone["allocations"].values())


def test_ended_allocation_is_sent_as_removed_to_its_team_only(running, member, outsider):
    _, theirs = running
    tick()

    def release_theirs_and_tick():
        release_request(theirs, user=outsider)
        tick()

    frames = frames_after(member, release_theirs_and_tick)

    assert [f["type"] for f in frames] == ["tick"]  # the pool's free capacity, nothing of theirs
    assert frames[0]["pools"]["a100"]["free_milli"] == 1000 and "allocations" not in frames[0]


@pytest.mark.parametrize(
    ("send", "code"),
    [
        ({"text_data": "{not json"}, "not_json"),
        ({"text_data": "[1, 2]"}, "unknown_action"),
        ({"text_data": '{"action": "cancel", "id": 1}'}, "unknown_action"),
        ({"bytes_data": b"\x00\x01"}, "binary_frame"),
        ({"text_data": '{"action": "snapshot", "pad": "' + "x" * 2000 + '"}'}, "too_long"),
    ],
)
def test_bad_client_frames_get_a_specific_error_and_change_nothing(running, member, send, code):
    ours, _ = running

    async def scenario():
        socket = connect(member)
        await socket.connect()
        await socket.receive_json_from(timeout=5)
        await socket.send_to(**send)
        reply = await socket.receive_json_from(timeout=5)
        still_open = await socket.receive_nothing(timeout=0.2)
        await socket.disconnect()
        return reply, still_open

    reply, still_open = async_to_sync(scenario)()

    assert reply["type"] == "error" and reply["code"] == code and reply["message"]
    assert still_open
    ours.refresh_from_db()
    assert ours.state == "scheduled"


def test_client_may_ask_for_a_fresh_snapshot(running, member):
    tick()

    async def scenario():
        socket = connect(member)
        await socket.connect()
        await socket.receive_json_from(timeout=5)
        await socket.send_json_to({"action": "snapshot"})
        reply = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return reply

    reply = async_to_sync(scenario)()

    assert reply["type"] == "snapshot" and len(reply["allocations"]) == 1
