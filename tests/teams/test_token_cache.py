"""API tokens are remembered in the shared cache with their user and the user's teams, and forgotten the
moment the token, its user, the user's memberships or one of their teams change."""

import datetime as dt
import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from teams.models import ApiToken, Membership
from teams.services import create_api_token, revoke_api_token, user_for_api_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def token_client(member):
    from rest_framework.test import APIClient

    token, secret = create_api_token(member, name="cached", expires_at=timezone.now() + dt.timedelta(days=1))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client, token


def token_reads(client) -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        status = client.get("/api/v1/requests/").status_code
    return status, [q["sql"] for q in captured.captured_queries if 'FROM "portal_apitoken"' in q["sql"]]


def test_a_second_call_reads_no_token_row(token_client):
    client, _ = token_client
    assert token_reads(client)[0] == 200
    status, reads = token_reads(client)
    assert status == 200 and reads == []


def test_a_revoked_token_is_refused_at_once(token_client, member):
    client, token = token_client
    assert token_reads(client)[0] == 200

    revoke_api_token(token, user=member)

    assert token_reads(client)[0] == 401


def test_a_token_revoked_in_the_admin_is_refused_at_once(token_client):
    client, token = token_client
    assert token_reads(client)[0] == 200
    token.revoked_at = timezone.now()
    token.save()  # as the admin saves it

    assert token_reads(client)[0] == 401


def test_a_deactivated_user_is_refused_at_once(token_client, member):
    client, _ = token_client
    assert token_reads(client)[0] == 200

    member.is_active = False
    member.save()

    assert token_reads(client)[0] == 401


def test_a_token_expires_while_remembered(token_client, time_machine):
    client, token = token_client
    assert token_reads(client)[0] == 200

    time_machine.move_to(token.expires_at + dt.timedelta(seconds=1))

    assert token_reads(client)[0] == 401


def test_last_used_is_still_written_at_most_once_a_minute(token_client, time_machine):
    client, token = token_client
    token_reads(client)
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    token_reads(client)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first

    time_machine.move_to(first + dt.timedelta(minutes=2))
    token_reads(client)
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


def submit(client, team: str = "") -> tuple[int, dict, list[str]]:
    """POST a 1/8 request; the answer and the SQL that read teams or memberships."""
    with CaptureQueriesContext(connection) as captured:
        body = {"name": "t", "gpu_milli": 125} | ({"team": team} if team else {})
        answer = client.post("/api/v1/requests/", body, format="json")
    reads = [q["sql"] for q in captured.captured_queries if 'FROM "portal_team"' in q["sql"]]
    return answer.status_code, answer.json(), reads


def test_a_second_submit_reads_no_team_or_membership_row(token_client):
    client, _ = token_client
    assert submit(client)[0] == 201
    status, _, reads = submit(client)
    assert status == 201 and reads == []


def test_a_member_removed_from_the_team_is_refused_at_once(token_client, member, team):
    client, _ = token_client
    assert submit(client)[0] == 201

    Membership.objects.get(user=member, team=team).delete()

    status, body, _ = submit(client, "vision")
    assert status == 400 and body["error"]["fields"]["team"] == ["You are in no team 'vision'."]


def test_a_member_added_to_a_second_team_must_name_it_at_once(token_client, member, other_team):
    client, _ = token_client
    assert submit(client)[0] == 201

    Membership.objects.create(user=member, team=other_team)

    status, body, _ = submit(client)
    assert status == 400 and body["error"]["fields"]["team"] == ["Name the team: you are in several."]
    status, body, _ = submit(client, "language")
    assert status == 201 and body["team"] == "language"


def test_a_team_renamed_is_known_by_its_new_slug_at_once(token_client, team):
    client, _ = token_client
    assert submit(client, "vision")[0] == 201

    team.slug = "sight"
    team.save()

    assert submit(client, "vision")[0] == 400
    assert submit(client, "sight")[0] == 201


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_membership_removed_while_another_call_reads_it_is_not_remembered_after_the_commit(member, team):
    """Another call reads the rows between the removal and its commit (so it sees the member still in
    the team) and caches them; the commit forgets them again."""
    _, secret = create_api_token(member, name="race", expires_at=timezone.now() + dt.timedelta(days=1))
    removed, read = threading.Event(), threading.Event()

    def another_call():
        try:
            removed.wait(5)
            user = user_for_api_token(secret)  # not in the cache: read from the committed rows
            assert [t.slug for t in user.__dict__["_teams"]] == ["vision"]
        finally:
            connection.close()
            read.set()

    reader = threading.Thread(target=another_call)
    reader.start()
    with transaction.atomic():
        Membership.objects.get(user=member, team=team).delete()
        removed.set()
        assert read.wait(5)
    reader.join()

    assert user_for_api_token(secret).__dict__["_teams"] == []
