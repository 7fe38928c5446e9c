import pytest
from django.urls import reverse

from scheduler_app.services.requests import submit_request


def test_login_page_is_served(client, db):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert "Log in" in response.text


def test_home_requires_login(client, db):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_wrong_password_shows_an_error_inline(client, member):
    response = client.post(reverse("login"), {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.text


@pytest.fixture
def two_teams_requests(team, other_team, member, outsider):
    submit_request(user=member, team=team, name="vision-job", task_type="training", gpu_milli=250)
    submit_request(user=outsider, team=other_team, name="language-job", task_type="training", gpu_milli=250)


def test_home_shows_only_the_users_teams_requests(client, member, two_teams_requests):
    client.force_login(member)
    response = client.get(reverse("home"))
    assert "vision-job" in response.text
    assert "language-job" not in response.text


def test_member_changes_password(client, member):
    client.force_login(member)
    response = client.post(
        reverse("password_change"),
        {
            "old_password": "pw-bob-123",
            "new_password1": "Long-new-pass-42",
            "new_password2": "Long-new-pass-42",
        },
    )
    assert response.status_code == 302
    member.refresh_from_db()
    assert member.check_password("Long-new-pass-42")
