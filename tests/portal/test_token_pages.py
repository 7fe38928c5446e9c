"""The API tokens page: create (secret shown once), list, revoke; only one's own tokens."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from teams.models import ApiToken
from teams.services import create_api_token, user_for_api_token


def make_token(user, name="laptop"):
    return create_api_token(user, name=name, expires_at=timezone.now() + dt.timedelta(days=30))


def test_tokens_page_needs_login(client, db):
    assert client.get(reverse("tokens")).status_code == 302


def test_member_creates_a_token_and_sees_the_secret_once(client, member):
    client.force_login(member)

    created = client.post(reverse("tokens"), {"name": "laptop CLI", "days": "30"})
    again = client.get(reverse("tokens"))

    token = ApiToken.objects.get(user=member)
    secret = created.text.split('id="token-secret"')[0].rsplit('value="', 1)[1].split('"')[0]
    assert user_for_api_token(secret) == member
    assert secret not in again.text and token.prefix in again.text
    assert token.expires_at - timezone.now() > dt.timedelta(days=29, hours=23)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": " ", "days": "30"}, "name", "Give the token a name, to recognise it later."),
        ({"name": "ci", "days": "400"}, "days", "Tokens live at most 365 days."),
        ({"name": "ci", "days": "0"}, "days", "The expiry must be in the future."),
        ({"name": "ci", "days": "soon"}, "days", "Enter a whole number."),
    ],
)
def test_bad_token_input_is_shown_at_its_field_and_writes_nothing(client, member, data, field, message):
    client.force_login(member)

    response = client.post(reverse("tokens"), data)

    assert response.status_code == 400
    group = response.text.split(f'id="field-{field}"')[1].split('<div class="field')[0]
    assert message in group
    assert not ApiToken.objects.exists()


def test_list_shows_only_the_users_tokens_with_their_dates(client, member, outsider):
    make_token(member, "mine")
    make_token(outsider, "theirs")
    client.force_login(member)

    response = client.get(reverse("tokens"))

    assert "mine" in response.text and "theirs" not in response.text
    assert "never" in response.text and "active" in response.text


def test_member_revokes_a_token(client, member):
    token, secret = make_token(member)
    client.force_login(member)

    response = client.post(reverse("token_revoke", args=[token.pk]), follow=True)

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert user_for_api_token(secret) is None
    assert "revoked" in response.text


def test_nobody_revokes_another_users_token(client, member, outsider):
    token, secret = make_token(member)
    client.force_login(outsider)

    response = client.post(reverse("token_revoke", args=[token.pk]))

    assert response.status_code == 404
    assert user_for_api_token(secret) == member


def test_tokens_page_queries_do_not_grow(client, member, django_assert_max_num_queries):
    for i in range(10):
        make_token(member, f"t{i}")
    client.force_login(member)

    with django_assert_max_num_queries(4):
        client.get(reverse("tokens"))
