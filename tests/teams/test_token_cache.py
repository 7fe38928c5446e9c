"""API tokens are remembered in the shared cache, and forgotten the moment they or their user change."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from teams.models import ApiToken
from teams.services import create_api_token, revoke_api_token

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
