"""The notification pages: a team's admins add and manage its channels, its members only see them,
another team's are a 404; each user has their own; bad input is told on its field and changes nothing."""

import pytest
from django.urls import reverse

from notifications.choices import ChannelKind, DeliveryState, EventKind
from notifications.delivery import deliver_due
from notifications.models import Channel, Delivery
from notifications.services import create_channel, pause_channel


def signed_in(client, user):
    client.force_login(user)
    return client


def test_a_team_admin_adds_a_webhook_and_sees_its_secret_once(client, team, team_admin, receiver):
    page = signed_in(client, team_admin).post(
        reverse("team_channels", args=[team.slug]),
        {"kind": "webhook", "name": "ops", "url": receiver.url, "events": [EventKind.REQUEST_FAILED]},
    )

    assert page.status_code == 200
    channel = Channel.objects.get()
    assert (channel.team, channel.name, channel.events) == (team, "ops", [EventKind.REQUEST_FAILED])
    secret = page.context["secret"]
    assert secret.startswith("whsec_") and secret in page.content.decode()
    shown = client.get(reverse("channel_detail", args=[channel.pk])).content.decode()
    assert secret not in shown and "Request failed" in shown
    team_page = client.get(reverse("team_detail", args=[team.slug])).content.decode()
    assert 'id="notifications"' in team_page and reverse("channel_detail", args=[channel.pk]) in team_page


def test_an_admin_tests_pauses_resumes_rotates_and_deletes(client, webhook, team, team_admin, receiver):
    signed_in(client, team_admin)

    def action(name):
        return client.post(reverse(name, args=[webhook.pk]))

    assert action("channel_test").status_code == 302
    deliver_due()
    log = client.get(reverse("channel_detail", args=[webhook.pk]))
    (attempt,) = log.context["attempts"]
    assert (attempt.delivery.kind, attempt.status_code) == (EventKind.TEST, 200)
    assert "Test message" in log.content.decode() and "HTTP 200" in log.content.decode()

    action("channel_pause")
    webhook.refresh_from_db()
    assert webhook.is_paused()
    action("channel_resume")
    webhook.refresh_from_db()
    assert not webhook.is_paused()

    rotated = action("channel_rotate_secret")
    assert rotated.status_code == 200 and rotated.context["secret"].startswith("whsec_")
    assert rotated.context["secret"] != receiver.secret

    gone = action("channel_delete")
    assert gone.url == reverse("team_channels", args=[team.slug])
    assert not Channel.objects.exists()


def test_the_delivery_log_shows_the_last_fifty_tries_with_errors_and_durations(
    client, webhook, team_admin, receiver
):
    receiver.statuses = [200] * 51 + [503]
    for _ in range(52):
        Delivery.objects.create(channel=webhook, kind=EventKind.TEST, payload={"text": "t", "id": "x"})
    deliver_due()

    page = signed_in(client, team_admin).get(reverse("channel_detail", args=[webhook.pk]))

    assert len(page.context["attempts"]) == 50
    text = page.content.decode()
    assert "HTTP 503" in text and " ms</td>" in text
    assert page.context["waiting"] == 1  # the one that failed waits for its retry


def test_a_member_sees_the_channels_but_cannot_change_them(client, webhook, team, member):
    signed_in(client, member)

    listing = client.get(reverse("team_channels", args=[team.slug]))
    assert listing.status_code == 200 and "ops hook" in listing.content.decode()
    assert "Add channel" not in listing.content.decode()
    detail = client.get(reverse("channel_detail", args=[webhook.pk]))
    assert detail.status_code == 200 and "Send a test" not in detail.content.decode()

    added = client.post(
        reverse("team_channels", args=[team.slug]),
        {"kind": "slack", "name": "mine", "url": "https://hooks.example.org/x"},
    )
    assert added.status_code == 403
    for name in ("channel_test", "channel_pause", "channel_rotate_secret", "channel_delete"):
        assert client.post(reverse(name, args=[webhook.pk])).status_code == 403, name
    pause_channel(webhook, reason="broken")
    assert client.post(reverse("channel_resume", args=[webhook.pk])).status_code == 403
    webhook.refresh_from_db()
    assert Channel.objects.count() == 1 and webhook.is_paused()
    assert not Delivery.objects.exists()


def test_another_teams_channels_are_a_404(client, webhook, team, outsider, operator):
    for user in (outsider, operator):
        signed_in(client, user)
        assert client.get(reverse("team_channels", args=[team.slug])).status_code == 404
        assert client.get(reverse("channel_detail", args=[webhook.pk])).status_code == 404
        assert client.post(reverse("channel_delete", args=[webhook.pk])).status_code == 404
        assert client.post(reverse("team_channels", args=[team.slug]), {"kind": "email"}).status_code == 404
    assert Channel.objects.filter(pk=webhook.pk).exists()
    assert "ops hook" not in client.get(reverse("team_detail", args=[team.slug])).content.decode()


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({"kind": "webhook", "name": "x", "url": "http://10.0.0.1/hook"}, "url", "a private address"),
        ({"kind": "webhook", "name": "x", "url": "http://[::1]:8080/"}, "url", "a loopback address"),
        ({"kind": "slack", "name": "x", "url": "ftp://hooks.example.org/"}, "url", "http:// or https://"),
        ({"kind": "slack", "name": "x", "url": ""}, "url", "Give the http:// or https:// URL"),
        ({"kind": "email", "name": "x", "email": "not an address"}, "email", "email address"),
        ({"kind": "email", "name": "  ", "email": "a@example.org"}, "name", "required"),
        ({"kind": "pigeon", "name": "x"}, "kind", "Select a valid choice"),
        (
            {"kind": "email", "name": "x", "email": "a@example.org", "events": ["request.eaten"]},
            "events",
            "Select a valid choice",
        ),
    ],
)
def test_bad_input_is_told_on_its_field_and_changes_nothing(
    client, team, team_admin, settings, form, field, message
):
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = []

    page = signed_in(client, team_admin).post(reverse("team_channels", args=[team.slug]), form)

    assert page.status_code == 400
    errors = page.context["form"].errors[field]
    assert any(message in error for error in errors), errors
    assert message in page.content.decode().replace("&#x27;", "'")
    assert not Channel.objects.exists()


def test_each_user_keeps_their_own_channels(client, member, outsider):
    signed_in(client, member)
    added = client.post(reverse("my_channels"), {"kind": "email", "name": "me", "email": "bob@example.org"})
    channel = Channel.objects.get()
    assert added.url == reverse("channel_detail", args=[channel.pk])
    assert (channel.user, channel.team, channel.kind) == (member, None, ChannelKind.EMAIL)
    page = client.get(reverse("my_channels"))
    assert [c.pk for c in page.context["channels"]] == [channel.pk]
    assert "bob@example.org" in page.content.decode()
    assert client.post(reverse("channel_test", args=[channel.pk])).status_code == 302
    assert Delivery.objects.get().state == DeliveryState.PENDING

    signed_in(client, outsider)
    assert list(client.get(reverse("my_channels")).context["channels"]) == []
    assert client.get(reverse("channel_detail", args=[channel.pk])).status_code == 404
    assert client.post(reverse("channel_delete", args=[channel.pk])).status_code == 404


def test_a_users_channel_is_not_shown_to_their_teams_admin(client, member, team_admin):
    mine, _ = create_channel(member, team=None, kind=ChannelKind.EMAIL, name="me", email="bob@example.org")

    assert signed_in(client, team_admin).get(reverse("channel_detail", args=[mine.pk])).status_code == 404
