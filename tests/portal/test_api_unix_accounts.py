"""Unix accounts over the API: operators map a team (PATCH /teams/<slug>/) or a user
(PUT /users/<username>/unix-account/); members see their team's; bad names are a clear 400."""

import json

import pytest

from audit.models import Event
from teams.models import Team, UserUnixAccount


def test_an_operator_maps_a_team_and_its_members_see_it(api_client, team, member, operator):
    response = api_client(operator).patch("/api/v1/teams/vision/", {"unix_account": "vision"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == {"slug": "vision", "name": "Vision", "unix_account": "vision"}
    seen = api_client(member)
    assert seen.get("/api/v1/teams/vision/").json()["unix_account"] == "vision"
    assert seen.get("/api/v1/teams/").json()[0]["unix_account"] == "vision"


def test_an_empty_account_puts_the_team_back_on_the_agents_own_identity(api_client, team, operator):
    client = api_client(operator)
    client.patch("/api/v1/teams/vision/", {"unix_account": "vision"}, format="json")

    response = client.patch("/api/v1/teams/vision/", {"unix_account": ""}, format="json")

    assert response.json()["unix_account"] == "" and Team.objects.get(pk=team.pk).unix_account == ""


@pytest.mark.parametrize("who", ["team_admin", "member"])
def test_team_members_cannot_map_their_team(api_client, team, who, request):
    response = api_client(request.getfixturevalue(who)).patch(
        "/api/v1/teams/vision/", {"unix_account": "vision"}, format="json"
    )

    assert response.status_code == 403
    assert response.json()["error"]["message"] == "Only platform operators map teams to Unix accounts."
    assert Team.objects.get(pk=team.pk).unix_account == "" and not Event.objects.exists()


def test_outsiders_neither_see_nor_map_a_team(api_client, team, outsider):
    client = api_client(outsider)

    assert client.get("/api/v1/teams/vision/").status_code == 404
    assert client.patch("/api/v1/teams/vision/", {"unix_account": "x"}, format="json").status_code == 404
    assert Team.objects.get(pk=team.pk).unix_account == ""


BAD = [
    ({"unix_account": "root"}, "Jobs never run as root: name an unprivileged account."),
    ({"unix_account": "a" * 33}, "Ensure this field has no more than 32 characters."),
    ({"unix_account": "x" * 1_000_000}, "Ensure this field has no more than 32 characters."),
    ({"unix_account": "Bob"}, "Not a Unix user name"),
    ({"unix_account": " bob"}, "Not a Unix user name"),
    ({"unix_account": "bob\n"}, "Not a Unix user name"),
    ({"unix_account": 5}, "Not a valid string."),
    ({"unix_account": ["bob"]}, "Not a valid string."),
    ({"unix_account": None}, "This field may not be null."),
    ({}, "This field is required."),
]


@pytest.mark.parametrize(("body", "says"), BAD)
def test_a_bad_team_account_is_a_clear_400_and_changes_nothing(api_client, team, operator, body, says):
    response = api_client(operator).patch("/api/v1/teams/vision/", body, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error" and says in " ".join(error["fields"]["unix_account"])
    assert Team.objects.get(pk=team.pk).unix_account == "" and not Event.objects.exists()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"unix_account": "bob\\u0000"}', "unix_account"),
        ('{"unix_account": "\\ud800"}', "unix_account"),
        ('{"unix_account": "b\\ud800ob"}', "unix_account"),
    ],
)
def test_nul_and_lone_surrogates_are_a_clear_400(api_client, team, member, operator, raw, field):
    client = api_client(operator)

    answers = [
        client.patch("/api/v1/teams/vision/", raw, content_type="application/json"),
        client.put("/api/v1/users/bob/unix-account/", raw, content_type="application/json"),
    ]

    assert [a.status_code for a in answers] == [400, 400]
    assert all(field in a.json()["error"]["fields"] for a in answers)
    assert Team.objects.get(pk=team.pk).unix_account == "" and not UserUnixAccount.objects.exists()


def test_an_operator_maps_a_user_reads_it_back_and_removes_it(api_client, member, operator):
    client = api_client(operator)

    put = client.put("/api/v1/users/bob/unix-account/", {"unix_account": "bob_ldap"}, format="json")
    got = client.get("/api/v1/users/bob/unix-account/")
    removed = client.put("/api/v1/users/bob/unix-account/", {"unix_account": ""}, format="json")

    assert put.status_code == 200, put.json()
    assert put.json() == got.json() == {"username": "bob", "unix_account": "bob_ldap"}
    assert removed.json() == {"username": "bob", "unix_account": ""}
    assert not UserUnixAccount.objects.exists()


@pytest.mark.parametrize(("body", "says"), BAD)
def test_a_bad_user_account_is_a_clear_400_and_changes_nothing(api_client, member, operator, body, says):
    response = api_client(operator).put("/api/v1/users/bob/unix-account/", body, format="json")

    assert response.status_code == 400
    assert says in " ".join(response.json()["error"]["fields"]["unix_account"])
    assert not UserUnixAccount.objects.exists() and not Event.objects.exists()


@pytest.mark.parametrize("who", ["team_admin", "member", "outsider"])
def test_only_operators_read_or_map_a_users_account(api_client, member, who, request):
    client = api_client(request.getfixturevalue(who))

    assert client.get("/api/v1/users/bob/unix-account/").status_code == 403
    put = client.put("/api/v1/users/bob/unix-account/", {"unix_account": "bob"}, format="json")

    assert put.status_code == 403 and not UserUnixAccount.objects.exists()


def test_an_unknown_user_is_a_404_in_the_envelope(api_client, operator):
    response = api_client(operator).put(
        "/api/v1/users/ghost/unix-account/", {"unix_account": "g"}, format="json"
    )

    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_the_schema_documents_the_unix_account_endpoints_and_the_agent_fields(api_client, operator):
    schema = json.loads(api_client(operator).get("/api/v1/schema/", {"format": "json"}).content)

    paths = schema["paths"]
    assert {"get", "put"} <= paths["/api/v1/users/{username}/unix-account/"].keys()
    assert {"get", "patch"} <= paths["/api/v1/teams/{slug}/"].keys()
    components = schema["components"]["schemas"]
    assert {"user", "unix_account", "cpu_milli", "memory_mib"} <= components["Work"]["properties"].keys()
    assert "host_memory_exceeded_mib" in components["Finished"]["properties"]
    assert "isolation" in components["Register"]["properties"]
    assert "isolation" in components["OperatorNode"]["properties"]
