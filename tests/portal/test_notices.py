"""Notices to a team: on the home and team pages of its members only, dismissed by a member for themselves,
acknowledged by a team admin for the whole team, published live to the team's stream; another team's
notice is never shown nor dismissable."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.urls import reverse

from audit.models import Event, Notice, NoticeDismissal
from audit.notices import Finding, acknowledge_notice, dismiss_notice, notices_for, raise_notices
from infra.live import team_group
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
    assert NoticeDismissal.objects.filter(notice=ours, user=member).exists()
    assert ours.acknowledged_at is None and ours.resolved_at is None  # the episode goes on
    assert "Our job idles" not in client.get(reverse("home")).content.decode()


def test_dismissing_a_notice_hides_it_from_that_member_only(client, member, team_admin, team, notices):
    # given a member dismissed the team's notice
    ours, _ = notices
    client.force_login(member)
    client.post(reverse("notice_dismiss", args=[ours.pk]))

    # when the team admin looks at the team's pages
    client.force_login(team_admin)
    pages = [
        client.get(reverse(name, args=args)).text
        for name, args in (("home", []), ("team_detail", [team.slug]))
    ]

    # then the admin still sees it: one member's dismissal is theirs alone
    assert all("Our job idles under 5 %." in page for page in pages)
    assert [n.text for n in notices_for(team_admin)] == ["Our job idles under 5 %."]
    assert list(notices_for(member)) == []


def test_a_team_admin_acknowledges_a_notice_for_the_whole_team_and_it_is_audited(
    client, member, team_admin, team, notices
):
    # given the team's open notice, which its member sees
    ours, _ = notices
    client.force_login(team_admin)
    assert "Acknowledge for the team" in client.get(reverse("team_detail", args=[team.slug])).text

    # when the team admin acknowledges it for the team
    response = client.post(reverse("notice_acknowledge", args=[ours.pk]), {"next": f"/teams/{team.slug}/"})

    # then it leaves every member's lists, says who acknowledged it, and the event log has it
    assert response.status_code == 302 and response["Location"] == f"/teams/{team.slug}/"
    ours.refresh_from_db()
    assert (ours.acknowledged_by, ours.acknowledged_at is not None) == (team_admin, True)
    assert list(notices_for(member)) == [] and list(notices_for(team_admin)) == []
    event = Event.objects.get(to_state="acknowledged", object_id=ours.pk)
    assert (event.actor, event.team_id) == (team_admin, team.pk)
    assert event.reason == "acknowledged for the team: Our job idles under 5 %."


def test_a_member_may_not_acknowledge_for_the_team_nor_sees_the_button(client, member, team, notices):
    ours, _ = notices
    client.force_login(member)

    page = client.get(reverse("team_detail", args=[team.slug])).text
    response = client.post(reverse("notice_acknowledge", args=[ours.pk]))

    assert "Acknowledge for the team" not in page
    assert response.status_code == 403
    ours.refresh_from_db()
    assert ours.acknowledged_at is None
    with pytest.raises(NotAllowed):
        acknowledge_notice(ours, user=member)


def test_a_foreign_notice_cannot_be_dismissed(client, member, notices):
    _, theirs = notices
    client.force_login(member)

    response = client.post(reverse("notice_dismiss", args=[theirs.pk]), {"next": "https://evil.example/"})

    assert response.status_code == 404
    assert not NoticeDismissal.objects.exists()
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

    response = client.post(
        reverse("team_idle_policy", args=[team.slug]),
        {"release": "1", "idle_minutes": "45", "idle_util_percent": "10"},
    )

    assert response.status_code == 302
    team.refresh_from_db()
    assert (team.release_idle_allocations, team.idle_minutes, team.idle_util_percent) == (True, 45, 10)
    assert team.idle_seconds() == 2700
    event = Event.objects.get(to_state="updated", object_id=team.pk)
    assert event.data == {
        "release_idle_allocations": {"from": False, "to": True},
        "idle_minutes": {"from": None, "to": 45},
        "idle_util_percent": {"from": 5, "to": 10},
    }
    page = client.get(reverse("team_detail", args=[team.slug])).content.decode()
    assert "under 10 % utilization" in page and "for 45 minutes" in page and "and is released" in page


def test_an_idle_time_out_of_range_is_refused_on_the_form(client, team_admin, team):
    client.force_login(team_admin)

    response = client.post(
        reverse("team_idle_policy", args=[team.slug]), {"idle_minutes": "2", "idle_util_percent": "5"}
    )

    assert response.status_code == 400
    assert "greater than or equal to 5" in response.content.decode()
    team.refresh_from_db()
    assert team.idle_minutes is None


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
    assert not NoticeDismissal.objects.filter(notice=theirs).exists()
    assert dismissed.status_code == 200 and dismissed.json()["dismissed_at"] is not None
    assert dismissed.json()["acknowledged_at"] is None
    assert unread == []


def test_the_api_dismisses_per_user_and_acknowledges_for_team_admins_only(
    api_client, member, team_admin, team, notices
):
    # given the team's notice, dismissed by its member through the API
    ours, _ = notices
    as_member, as_admin = api_client(member), api_client(team_admin)
    as_member.post(f"/api/v1/notices/{ours.pk}/dismiss/")

    # when the admin lists unread notices, the member tries to acknowledge, then the admin does
    admin_unread = as_admin.get("/api/v1/notices/", {"unread": "1"}).json()["results"]
    refused = as_member.post(f"/api/v1/notices/{ours.pk}/acknowledge/")
    acknowledged = as_admin.post(f"/api/v1/notices/{ours.pk}/acknowledge/")

    # then the member's dismissal did not hide it from the admin, and only the admin's acknowledgement
    # hides it from the team
    assert [(n["id"], n["dismissed_at"]) for n in admin_unread] == [(ours.pk, None)]
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "permission_denied")
    body = acknowledged.json()
    assert (acknowledged.status_code, body["acknowledged_by"], body["acknowledged_at"] is not None) == (
        200,
        "alice",
        True,
    )
    assert as_admin.get("/api/v1/notices/", {"unread": "1"}).json()["results"] == []
