"""/api/v1/teams/<slug>/idle-policy/: the team reads when its work counts as idle, its admins and operators
set it (logged on the team), members get 403, outsiders 404, and a bad value a specific 400 that changes
nothing."""

import pytest

from audit.models import Event
from teams.models import Team

URL = "/api/v1/teams/vision/idle-policy/"
POLICY = {"idle_minutes": 45, "idle_util_percent": 10, "release_idle_allocations": True}


def stored_policy() -> dict:
    team = Team.objects.get(slug="vision")
    return {
        "idle_minutes": team.idle_minutes,
        "idle_util_percent": team.idle_util_percent,
        "release_idle_allocations": team.release_idle_allocations,
    }


def test_a_member_reads_the_default_policy_with_the_sites_idle_time(api_client, member, settings):
    settings.TELEMETRY_IDLE_AFTER_S = 1800

    response = api_client(member).get(URL)

    assert response.status_code == 200
    assert response.json() == {
        "idle_minutes": None,
        "idle_util_percent": 5,
        "release_idle_allocations": False,
        "effective_idle_minutes": 30,
    }


@pytest.mark.parametrize("who", ["team_admin", "operator"])
def test_a_team_admin_or_an_operator_sets_it_and_the_change_is_logged_on_the_team(
    request, api_client, team, who
):
    actor = request.getfixturevalue(who)

    response = api_client(actor).put(URL, POLICY, format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == {**POLICY, "effective_idle_minutes": 45}
    assert stored_policy() == POLICY
    team.refresh_from_db()
    assert team.idle_seconds() == 45 * 60
    event = Event.objects.filter(team=team, actor=actor).latest("pk")
    assert event.reason == "idle work policy"


def test_null_minutes_go_back_to_the_sites_default(api_client, team_admin, settings):
    settings.TELEMETRY_IDLE_AFTER_S = 1800
    client = api_client(team_admin)
    client.put(URL, POLICY, format="json")

    response = client.put(URL, {**POLICY, "idle_minutes": None}, format="json")

    assert response.status_code == 200
    assert (response.json()["idle_minutes"], response.json()["effective_idle_minutes"]) == (None, 30)


def test_a_member_gets_403_and_an_outsider_404_and_nothing_changes(api_client, member, outsider):
    before = stored_policy()

    assert api_client(member).put(URL, POLICY, format="json").status_code == 403
    assert api_client(outsider).put(URL, POLICY, format="json").status_code == 404
    assert api_client(outsider).get(URL).status_code == 404
    assert stored_policy() == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"idle_minutes": 4}, "idle_minutes"),
        ({"idle_minutes": 7 * 24 * 60 + 1}, "idle_minutes"),
        ({"idle_minutes": "45"}, "idle_minutes"),
        ({"idle_minutes": 45.5}, "idle_minutes"),
        ({"idle_util_percent": 0}, "idle_util_percent"),
        ({"idle_util_percent": 101}, "idle_util_percent"),
        ({"idle_util_percent": None}, "idle_util_percent"),
        ({"idle_util_percent": True}, "idle_util_percent"),
        ({"release_idle_allocations": "yes"}, "release_idle_allocations"),
        ({"release_idle_allocations": 1}, "release_idle_allocations"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field_and_nothing_changes(api_client, team_admin, change, field):
    before = stored_policy()

    response = api_client(team_admin).put(URL, {**POLICY, **change}, format="json")

    assert response.status_code == 400
    assert field in str(response.json())
    assert stored_policy() == before


def test_a_missing_field_is_a_400_and_nothing_changes(api_client, team_admin):
    before = stored_policy()

    response = api_client(team_admin).put(URL, {"idle_minutes": 45}, format="json")

    assert response.status_code == 400
    assert {"idle_util_percent", "release_idle_allocations"} <= set(
        str(response.json()).replace("'", " ").split()
    )
    assert stored_policy() == before
