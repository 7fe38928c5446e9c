"""Tokens, teams and quotas over the API; throttling; the OpenAPI schema and Swagger UI served locally."""

import datetime as dt

import pytest
from django.utils import timezone

from infra.api.throttling import PerUserRateThrottle
from scheduler_app.models import TeamQuota
from teams.models import ApiToken


def test_token_lifecycle_over_the_api(api_client, member):
    client = api_client(member)

    created = client.post("/api/v1/tokens/", {"name": "laptop", "expires_in_days": 30}, format="json")

    assert created.status_code == 201
    secret = created.json()["token"]
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert {t["name"] for t in listed} == {"tests", "laptop"}
    assert all("token" not in t for t in listed)

    revoked = client.post(f"/api/v1/tokens/{created.json()['id']}/revoke/")
    assert revoked.json()["revoked_at"] is not None
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    after = client.get("/api/v1/requests/")
    assert after.status_code == 401
    assert after.json()["error"]["message"] == "Unknown, expired or revoked API token."


def test_expired_token_is_refused(api_client, member):
    client = api_client(member)
    ApiToken.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert client.get("/api/v1/requests/").status_code == 401


@pytest.mark.parametrize(
    ("payload", "field"), [({"name": ""}, "name"), ({"name": "x", "expires_in_days": 0}, "expires_in_days")]
)
def test_bad_token_request_names_the_field(api_client, member, payload, field):
    response = api_client(member).post("/api/v1/tokens/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert ApiToken.objects.count() == 1


def test_cannot_revoke_someone_elses_token(api_client, member, outsider):
    theirs, _ = __import__("teams.services", fromlist=["x"]).create_api_token(
        outsider, name="theirs", expires_at=timezone.now() + dt.timedelta(days=1)
    )
    response = api_client(member).post(f"/api/v1/tokens/{theirs.pk}/revoke/")
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_teams_and_quota_use(api_client, member, team, other_team, pool):
    TeamQuota.objects.create(team=team, pool=pool, guaranteed_milli=4000)
    client = api_client(member)

    assert client.get("/api/v1/teams/").json() == [
        {"slug": "vision", "name": "Vision", "role": "member", "unix_account": ""}
    ]
    quotas = client.get("/api/v1/teams/vision/quotas/").json()
    assert quotas == [{"pool": "a100", "guaranteed_milli": 4000, "used_milli": 0, "borrowed_milli": 0}]
    assert client.get("/api/v1/teams/language/quotas/").status_code == 404


def test_throttle_answers_429_with_retry_after(api_client, member, outsider, monkeypatch):
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"api": "3/min"})
    first, other = api_client(member), api_client(outsider)

    codes = [first.get("/api/v1/teams/").status_code for _ in range(4)]

    assert codes == [200, 200, 200, 429]
    refused = first.get("/api/v1/teams/")
    assert int(refused["Retry-After"]) > 0
    assert refused.json()["error"]["code"] == "throttled"
    assert other.get("/api/v1/teams/").status_code == 200


def test_openapi_schema_and_swagger_ui_are_served_locally(client, member):
    client.force_login(member)
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    docs = client.get("/api/v1/docs/")

    assert schema.status_code == 200
    assert b"/api/v1/requests/{id}/cancel/" in schema.content
    assert docs.status_code == 200
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs.text
    assert "cdn" not in docs.text.lower()


def test_the_schema_is_built_once_per_process_and_served_in_the_format_asked_for(client, member, monkeypatch):
    from drf_spectacular.generators import SchemaGenerator

    from portal.api.schema_view import SchemaView

    builds = []
    build = SchemaGenerator.get_schema
    monkeypatch.setattr(SchemaGenerator, "get_schema", lambda *a, **k: builds.append(1) or build(*a, **k))
    monkeypatch.setattr(SchemaView, "_built", {})
    client.force_login(member)

    as_json = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    as_yaml = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")

    assert len(builds) == 1
    assert as_json.json()["info"]["title"] == "GPU Portal API"
    assert as_yaml.content.startswith(b"openapi: ")
    assert as_json["Content-Disposition"].endswith('.json"')
    assert as_yaml["Content-Disposition"].endswith('.yaml"')


def test_schema_documents_the_error_format_on_every_operation(client, member):
    client.force_login(member)
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    for path in schema["paths"].values():
        for operation in path.values():
            assert {"400", "401", "404", "409", "429"} <= set(operation["responses"])
    assert "Error" in schema["components"]["schemas"]


def test_unknown_api_path_answers_in_the_error_format(client, member):
    client.force_login(member)
    response = client.get("/api/v1/requests/null,null/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_length_limits_count_what_was_sent_not_the_trimmed_text(api_client, member):
    response = api_client(member).post("/api/v1/tokens/", {"name": " " + "x" * 100}, format="json")
    assert response.status_code == 400
    assert "no more than 100 characters" in response.json()["error"]["fields"]["name"][0]
