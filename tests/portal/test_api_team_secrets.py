"""/api/v1/teams/<slug>/secrets/: the team lists names, its admins set and delete, nobody reads a value
back; outsiders get 404, members 403 on writes, bad values a specific 400 that changes nothing."""

import pytest

from audit.models import Event
from teams.crypto import decrypt
from teams.models import TeamSecret
from teams.services import set_team_secret

URL = "/api/v1/teams/vision/secrets/"
VALUE = "wandb-0123456789abcdef"


@pytest.fixture
def hf_token(team, team_admin):
    return set_team_secret(team, name="HF_TOKEN", value=VALUE, actor=team_admin)[0]


def test_a_member_lists_the_names_and_who_set_them_never_the_values(api_client, member, hf_token):
    response = api_client(member).get(URL)

    assert response.status_code == 200
    (listed,) = response.json()
    assert (listed["name"], listed["updated_by"]) == ("HF_TOKEN", "alice")
    assert set(listed) == {"name", "created_at", "updated_at", "updated_by"}
    assert VALUE not in response.text and hf_token.encrypted_value not in response.text


def test_a_team_admin_creates_with_201_replaces_with_200_and_never_gets_the_value_back(
    api_client, team_admin
):
    client = api_client(team_admin)

    created = client.put(f"{URL}WANDB_API_KEY/", {"value": VALUE}, format="json")
    replaced = client.put(f"{URL}WANDB_API_KEY/", {"value": "  spaces kept  "}, format="json")

    assert (created.status_code, replaced.status_code) == (201, 200)
    assert replaced.json()["name"] == "WANDB_API_KEY" and "value" not in replaced.json()
    assert VALUE not in created.text
    assert decrypt(TeamSecret.objects.get().encrypted_value) == "  spaces kept  "


def test_a_team_admin_deletes_a_secret_and_a_second_delete_is_404(api_client, team_admin, hf_token):
    client = api_client(team_admin)

    first = client.delete(f"{URL}HF_TOKEN/")
    second = client.delete(f"{URL}HF_TOKEN/")

    assert (first.status_code, second.status_code) == (204, 404)
    assert not TeamSecret.objects.exists()


def test_a_member_gets_403_on_writes_and_nothing_changes(api_client, member, hf_token):
    client = api_client(member)

    put = client.put(f"{URL}HF_TOKEN/", {"value": "stolen-value"}, format="json")
    new = client.put(f"{URL}NEW_ONE/", {"value": "stolen-value"}, format="json")
    delete = client.delete(f"{URL}HF_TOKEN/")

    assert (put.status_code, new.status_code, delete.status_code) == (403, 403, 403)
    assert put.json()["error"]["code"] == "permission_denied"
    assert [(s.name, decrypt(s.encrypted_value)) for s in TeamSecret.objects.all()] == [("HF_TOKEN", VALUE)]


def test_an_outsider_gets_404_on_every_secret_endpoint(api_client, outsider, hf_token):
    client = api_client(outsider)

    answers = [
        client.get(URL),
        client.put(f"{URL}HF_TOKEN/", {"value": "stolen-value"}, format="json"),
        client.put(f"{URL}NEW_ONE/", {"value": "stolen-value"}, format="json"),
        client.delete(f"{URL}HF_TOKEN/"),
    ]

    assert [a.status_code for a in answers] == [404, 404, 404, 404]
    assert {a.json()["error"]["code"] for a in answers} == {"not_found"}
    assert list(TeamSecret.objects.values_list("name", flat=True)) == ["HF_TOKEN"]


@pytest.mark.parametrize(
    ("name", "body", "field", "says"),
    [
        ("HF_TOKEN", {"value": "abc"}, "value", "at least 4 characters, so that masking it in job logs"),
        ("HF_TOKEN", {"value": "x" * 4097}, "value", "at most 4096 characters"),
        ("HF_TOKEN", {"value": 1234}, "value", "Not a valid string."),
        ("HF_TOKEN", {}, "value", "This field is required."),
        ("HF-TOKEN", {"value": VALUE}, "name", "'HF-TOKEN' is not a variable name"),
        ("CUDA_MPS_PIPE_DIRECTORY", {"value": VALUE}, "name", "reserved: the node agent sets it"),
    ],
)
def test_a_bad_secret_gets_a_specific_400_and_changes_nothing(
    api_client, team_admin, hf_token, name, body, field, says
):
    response = api_client(team_admin).put(f"{URL}{name}/", body, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert says in " ".join(error["fields"][field])
    assert [(s.name, decrypt(s.encrypted_value)) for s in TeamSecret.objects.all()] == [("HF_TOKEN", VALUE)]
    assert Event.objects.filter(content_type__model="teamsecret").count() == 1


def test_the_schema_describes_the_secret_endpoints(client, member):
    client.force_login(member)

    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    listing = schema["paths"]["/api/v1/teams/{slug}/secrets/"]["get"]
    one = schema["paths"]["/api/v1/teams/{slug}/secrets/{name}/"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"]["items"] == {
        "$ref": "#/components/schemas/TeamSecret"
    }
    assert {"200", "201", "400", "403", "404"} <= set(one["put"]["responses"])
    assert "204" in one["delete"]["responses"]
    assert "value" not in schema["components"]["schemas"]["TeamSecret"]["properties"]
    assert schema["components"]["schemas"]["SetTeamSecret"]["required"] == ["value"]
