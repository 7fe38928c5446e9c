"""Notification channels over REST: who may add and manage them, what is never shown back, bad input."""

import pytest

from notifications.choices import ChannelKind, DeliveryState, EventKind
from notifications.delivery import deliver_due
from notifications.models import Channel
from notifications.services import create_channel

URL = "/api/v1/notification-channels/"


def test_a_team_admin_adds_a_webhook_and_gets_its_secret_once(api_client, team_admin, receiver):
    client = api_client(team_admin)

    made = client.post(
        URL,
        {
            "team": "vision",
            "kind": "webhook",
            "name": "ops",
            "url": receiver.url + "?token=abc",
            "events": [EventKind.REQUEST_FAILED],
        },
        format="json",
    )

    assert made.status_code == 201, made.json()
    body = made.json()
    assert body["secret"].startswith("whsec_")
    assert body["target"] == f"http://127.0.0.1:{receiver.server.server_address[1]}/…"
    shown = client.get(f"{URL}{body['id']}/").json()
    assert "secret" not in shown and "token=abc" not in str(shown) and "url" not in shown
    assert shown["events"] == [EventKind.REQUEST_FAILED]


def test_a_member_sees_the_teams_channels_but_cannot_manage_them(api_client, webhook, member):
    client = api_client(member)

    assert [c["id"] for c in client.get(URL).json()["results"]] == [webhook.pk]
    assert (
        client.post(
            URL, {"team": "vision", "kind": "slack", "name": "x", "url": "https://h.example/x"}, format="json"
        ).status_code
        == 403
    )
    assert client.delete(f"{URL}{webhook.pk}/").status_code == 403
    assert client.post(f"{URL}{webhook.pk}/test/").status_code == 403
    assert client.post(f"{URL}{webhook.pk}/rotate-secret/").status_code == 403
    assert Channel.objects.filter(pk=webhook.pk).exists()


def test_another_teams_channels_are_never_visible(api_client, webhook, outsider, member):
    mine, _ = create_channel(member, team=None, kind=ChannelKind.EMAIL, name="me", email="bob@example.org")
    client = api_client(outsider)

    assert client.get(URL).json()["results"] == []
    for path in (f"{URL}{webhook.pk}/", f"{URL}{mine.pk}/", f"{URL}{webhook.pk}/deliveries/"):
        assert client.get(path).status_code == 404
    assert client.delete(f"{URL}{webhook.pk}/").status_code == 404
    assert (
        client.post(
            URL, {"team": "vision", "kind": "slack", "name": "x", "url": "https://h.example/x"}, format="json"
        ).status_code
        == 404
    )
    assert Channel.objects.count() == 2


def test_a_users_own_channel_is_theirs_alone(api_client, member, team_admin):
    made = api_client(member).post(
        URL, {"kind": "email", "name": "me", "email": "bob@example.org"}, format="json"
    )

    assert made.status_code == 201, made.json()
    assert made.json()["user"] == "bob" and made.json()["team"] is None and made.json()["secret"] == ""
    assert api_client(team_admin).get(f"{URL}{made.json()['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "webhook", "name": "x", "url": "ftp://files.example/x"}, "url"),
        ({"kind": "webhook", "name": "x", "url": "javascript:alert(1)"}, "url"),
        ({"kind": "webhook", "name": "x", "url": "https://h.example/" + "a" * 2000}, "url"),
        ({"kind": "webhook", "name": "x", "url": "https://user:pw@h.example/x"}, "url"),
        ({"kind": "webhook", "name": "x", "url": "https://h.example/a b"}, "url"),
        ({"kind": "slack", "name": "x"}, "url"),
        ({"kind": "email", "name": "x", "email": "not an address"}, "email"),
        ({"kind": "webhook", "name": "", "url": "https://h.example/x"}, "name"),
        (
            {"kind": "webhook", "name": "x", "url": "https://h.example/x", "events": ["request.eaten"]},
            "events",
        ),
        ({"kind": "pigeon", "name": "x"}, "kind"),
        ({"kind": "webhook", "name": 5, "url": "https://h.example/x"}, "name"),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(api_client, member, body, field):
    answer = api_client(member).post(URL, body, format="json")

    assert answer.status_code == 400, answer.json()
    assert field in str(answer.json())
    assert not Channel.objects.exists()


def test_a_lone_surrogate_is_refused(api_client, member):
    answer = api_client(member).post(
        URL,
        b'{"kind": "webhook", "name": "x\\ud800", "url": "https://h.example/x"}',
        content_type="application/json",
    )

    assert answer.status_code == 400
    assert not Channel.objects.exists()


def test_the_owner_tests_a_channel_and_reads_its_delivery_log(api_client, webhook, team_admin, receiver):
    client = api_client(team_admin)
    receiver.statuses = [500]

    queued = client.post(f"{URL}{webhook.pk}/test/")
    deliver_due()

    assert queued.status_code == 202
    log = client.get(f"{URL}{webhook.pk}/deliveries/").json()
    assert [(d["kind"], d["state"], d["attempts"]) for d in log] == [
        (EventKind.TEST, DeliveryState.PENDING, 1)
    ]
    assert log[0]["tries"][0]["status_code"] == 500 and log[0]["tries"][0]["ok"] is False
    assert receiver.arrivals[0]["verified"] and receiver.arrivals[0]["payload"]["type"] == "test"


def test_pause_resume_and_a_new_secret(api_client, webhook, team_admin, receiver):
    client = api_client(team_admin)

    assert client.post(f"{URL}{webhook.pk}/pause/").json()["paused"] is True
    assert client.post(f"{URL}{webhook.pk}/test/").status_code == 400
    assert client.post(f"{URL}{webhook.pk}/resume/").json()["paused"] is False
    receiver.secret = client.post(f"{URL}{webhook.pk}/rotate-secret/").json()["secret"]
    client.post(f"{URL}{webhook.pk}/test/")
    deliver_due()

    assert [a["verified"] for a in receiver.arrivals] == [True]  # signed with the new secret


def test_a_change_is_validated_like_a_new_channel(api_client, webhook, team_admin):
    client = api_client(team_admin)

    assert client.patch(f"{URL}{webhook.pk}/", {"url": "gopher://x"}, format="json").status_code == 400
    changed = client.patch(
        f"{URL}{webhook.pk}/", {"events": ["budget.threshold"], "name": "budget"}, format="json"
    )

    assert changed.status_code == 200, changed.json()
    assert (changed.json()["name"], changed.json()["events"]) == ("budget", ["budget.threshold"])
