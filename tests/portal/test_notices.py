"""Notices to a team: on the home and team pages of its members only, dismissed by a member, published
live to the team's stream; another team's notice is never shown nor dismissable."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.urls import reverse

from audit.models import Event, Notice
from audit.notices import Finding, dismiss_notice, notices_for, raise_notices
from scheduler_app.live import team_group
from teams.permissions import NotAllowed


@pytest.fixture
def notices(team, other_team, make_node):
    node = make_node("node-1", gpus=1)
    ours, theirs = raise_notices(
        [
            Finding("idle", team.pk, "idle:request:1", node, "Our job idles under 5 %."),
            Finding("memory_leak", other_team.pk, "memory_leak:request:2", node, "Their job leaks memory."),
        ],
        kinds=["idle", "memory_leak"],
    )
    return ours, theirs


def test_members_see_their_teams_notices_on_home_and_team_pages(client, member, team, notices):
    client.force_login(member)

    home = client.get(reverse("home")).content.decode()
    team_page = client.get(reverse("team_detail", args=[team.slug])).content.decode()

    for page in (home, team_page):
        assert "Our job idles under 5 %." in page
        assert "Their job leaks memory." not in page


def test_an_outsider_sees_only_their_own_teams_notice(client, outsider, notices):
    client.force_login(outsider)

    home = client.get(reverse("home")).content.decode()

    assert "Their job leaks memory." in home
    assert "Our job idles" not in home
    assert [n.text for n in notices_for(outsider)] == ["Their job leaks memory."]


def test_a_member_dismisses_a_notice_and_it_leaves_the_list(client, member, team, notices):
    ours, _ = notices
    client.force_login(member)

    response = client.post(reverse("notice_dismiss", args=[ours.pk]), {"next": f"/teams/{team.slug}/"})

    assert response.status_code == 302 and response["Location"] == f"/teams/{team.slug}/"
    ours.refresh_from_db()
    assert ours.dismissed_at is not None and ours.resolved_at is None  # the episode goes on
    assert "Our job idles" not in client.get(reverse("home")).content.decode()


def test_a_foreign_notice_cannot_be_dismissed(client, member, notices):
    _, theirs = notices
    client.force_login(member)

    response = client.post(reverse("notice_dismiss", args=[theirs.pk]), {"next": "https://evil.example/"})

    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.dismissed_at is None
    with pytest.raises(NotAllowed):
        dismiss_notice(theirs, user=member)


def test_dismissing_goes_back_only_to_this_site(client, member, notices):
    client.force_login(member)

    response = client.post(reverse("notice_dismiss", args=[notices[0].pk]), {"next": "https://evil.example/"})

    assert response["Location"] == reverse("home")


@pytest.mark.django_db(transaction=True)
def test_a_new_notice_is_published_to_its_team_only(team, other_team, make_node):
    layer = get_channel_layer()
    ours, theirs = async_to_sync(_listen)(layer, team_group(team.pk), team_group(other_team.pk))
    node = make_node("node-9", gpus=1)

    raise_notices([Finding("idle", team.pk, "idle:request:7", node, "Idle.")], kinds=["idle"])

    received = async_to_sync(_drain)(layer, ours)
    assert [
        (m["object"], m.get("to") or m.get("kind"), m.get("reason") or m.get("text")) for m in received
    ] == [
        ("node", "idle", "Idle."),  # the Event
        ("notice", "idle", "Idle."),
    ]
    assert received[1]["id"] == Notice.objects.get().pk
    assert async_to_sync(_drain)(layer, theirs) == []


async def _listen(layer, *groups):
    channels = []
    for group in groups:
        channels.append(await layer.new_channel())
        await layer.group_add(group, channels[-1])
    return channels


async def _drain(layer, channel) -> list[dict]:
    """The messages waiting on `channel`, in order, until none comes for half a second."""
    received = []
    while True:
        try:
            async with asyncio.timeout(0.5):
                received.append(await layer.receive(channel))
        except TimeoutError:
            return received


def test_a_team_admin_sets_the_idle_policy_and_it_is_logged(client, team_admin, team):
    client.force_login(team_admin)

    response = client.post(reverse("team_idle_policy", args=[team.slug]), {"release": "1"})

    assert response.status_code == 302
    team.refresh_from_db()
    assert team.release_idle_allocations is True
    event = Event.objects.get(to_state="updated", object_id=team.pk)
    assert event.data == {"release_idle_allocations": {"from": False, "to": True}}
    assert "and is released" in client.get(reverse("team_detail", args=[team.slug])).content.decode()


@pytest.mark.parametrize("who, status", [("member", 403), ("outsider", 404)])
def test_only_team_admins_set_the_idle_policy(client, request, team, who, status):
    client.force_login(request.getfixturevalue(who))

    response = client.post(reverse("team_idle_policy", args=[team.slug]), {"release": "1"})

    assert response.status_code == status
    team.refresh_from_db()
    assert team.release_idle_allocations is False


def test_the_api_lists_only_the_users_teams_notices_and_dismisses_them(api_client, member, team, notices):
    ours, theirs = notices
    client = api_client(member)

    listed = client.get("/api/v1/notices/").json()["results"]
    foreign = client.post(f"/api/v1/notices/{theirs.pk}/dismiss/")
    dismissed = client.post(f"/api/v1/notices/{ours.pk}/dismiss/")
    unread = client.get("/api/v1/notices/", {"unread": "1"}).json()["results"]

    assert [(n["id"], n["team"], n["kind"], n["open"]) for n in listed] == [
        (ours.pk, team.slug, "idle", True)
    ]
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "not_found"
    theirs.refresh_from_db()
    assert theirs.dismissed_at is None
    assert dismissed.status_code == 200 and dismissed.json()["dismissed_at"] is not None
    assert unread == []
