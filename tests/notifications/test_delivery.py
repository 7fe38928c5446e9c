"""Events become deliveries in their own transaction and reach a real receiver signed; a receiver that
fails is retried with backoff, and a channel that keeps failing is paused with a notice."""

import datetime as dt

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from audit.choices import NoticeKind
from audit.models import Notice
from notifications.choices import ChannelKind, DeliveryState, EventKind
from notifications.constants import MAX_ATTEMPTS, PAUSE_AFTER_FAILED_DELIVERIES
from notifications.delivery import backoff_s, deliver_due
from notifications.models import Delivery, DeliveryAttempt
from notifications.services import create_channel, resume_channel, send_test
from scheduler_app.services.agents import report_finished, report_started


def kinds_of(channel) -> list[str]:
    return list(
        Delivery.objects.filter(channel=channel).order_by("created_at").values_list("kind", flat=True)
    )


def test_a_requests_start_and_failure_reach_the_receiver_signed(webhook, receiver, place, node):
    request = place("python train.py")

    report_started(node, request.pk)
    report_finished(node, request.pk, exit_code=3)
    ran = deliver_due()

    assert ran == {DeliveryState.DELIVERED: 2}
    assert [a["verified"] for a in receiver.arrivals] == [True, True]
    started, failed = (a["payload"] for a in receiver.arrivals)
    assert (started["type"], failed["type"]) == (EventKind.REQUEST_STARTED, EventKind.REQUEST_FAILED)
    assert failed["subject"] == {"type": "request", "id": request.pk, "name": "job"}
    assert failed["team"] == {"slug": "vision", "name": "Vision"}
    assert (failed["from_state"], failed["to_state"]) == ("running", "failed")
    assert all(a["header_id"] == a["id"] for a in receiver.arrivals)
    assert receiver.events_counted() == {str(d.pk) for d in Delivery.objects.all()}


def test_an_event_rolled_back_is_never_delivered(webhook, place, node):
    request = place("python train.py")

    with pytest.raises(RuntimeError), transaction.atomic():
        report_started(node, request.pk)
        assert kinds_of(webhook) == [EventKind.REQUEST_STARTED]  # written with the event
        raise RuntimeError("undo")

    assert not Delivery.objects.exists()


def test_a_channel_hears_only_the_kinds_it_chose_and_its_own_teams_events(
    team, team_admin, other_team, outsider, receiver, place, node
):
    failures, _ = create_channel(
        team_admin,
        team=team,
        kind=ChannelKind.SLACK,
        name="failures",
        url=receiver.url,
        events=[EventKind.REQUEST_FAILED],
    )
    elsewhere, _ = create_channel(outsider, team=None, kind=ChannelKind.SLACK, name="mine", url=receiver.url)
    request = place("python train.py")

    report_started(node, request.pk)
    report_finished(node, request.pk, exit_code=0)
    report_started(node, (second := place("python eval.py", card=1)).pk)
    report_finished(node, second.pk, exit_code=1)

    assert kinds_of(failures) == [EventKind.REQUEST_FAILED]
    assert kinds_of(elsewhere) == []


def test_a_users_channel_hears_of_their_own_work_only(team, member, team_admin, receiver, place, node):
    mine, _ = create_channel(member, team=None, kind=ChannelKind.SLACK, name="me", url=receiver.url)
    admins, _ = create_channel(team_admin, team=None, kind=ChannelKind.SLACK, name="admin", url=receiver.url)
    request = place("python train.py")  # the member's

    report_started(node, request.pk)

    assert kinds_of(mine) == [EventKind.REQUEST_STARTED]
    assert kinds_of(admins) == []


def test_a_receiver_answering_500_three_times_gets_the_event_on_the_fourth_try(
    webhook, receiver, place, node
):
    receiver.statuses = [500, 500, 500]
    report_started(node, place("python train.py").pk)
    delivery = Delivery.objects.get()
    now = timezone.now()

    for attempt in range(1, 5):
        assert deliver_due(now) == {DeliveryState.PENDING if attempt < 4 else DeliveryState.DELIVERED: 1}
        assert deliver_due(now) == {}  # not due again before its backoff has passed
        now += dt.timedelta(seconds=backoff_s(attempt))

    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == (DeliveryState.DELIVERED, 4)
    tries = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(t.number, t.status_code, t.ok) for t in tries] == [
        (1, 500, False),
        (2, 500, False),
        (3, 500, False),
        (4, 200, True),
    ]
    assert [a["id"] for a in receiver.arrivals] == [str(delivery.pk)] * 4
    assert receiver.events_counted() == {str(delivery.pk)}
    assert [backoff_s(n) for n in (1, 2, 3)] == [10, 20, 40]


def test_a_channel_that_keeps_failing_is_paused_with_a_notice_and_an_email(
    webhook, receiver, team, team_admin, place, node, django_capture_on_commit_callbacks
):
    team_admin.email = "alice@example.org"
    team_admin.save()
    receiver.statuses = [503] * (MAX_ATTEMPTS * PAUSE_AFTER_FAILED_DELIVERIES)
    for card in range(PAUSE_AFTER_FAILED_DELIVERIES):
        report_started(node, place("python train.py", card=card % 2, gpu_milli=125).pk)
    now = timezone.now()

    for _ in range(MAX_ATTEMPTS):
        with django_capture_on_commit_callbacks(execute=True):
            deliver_due(now)
        now += dt.timedelta(seconds=backoff_s(MAX_ATTEMPTS))

    webhook.refresh_from_db()
    assert webhook.is_paused() and "503" in webhook.paused_reason
    assert set(Delivery.objects.values_list("state", flat=True)) == {DeliveryState.FAILED}
    notice = Notice.objects.get(kind=NoticeKind.CHANNEL_PAUSED)
    assert notice.team == team and "ops hook" in notice.text
    assert [m.to for m in mail.outbox] == [["alice@example.org"]]
    report_started(node, place("python more.py", gpu_milli=125).pk)
    assert Delivery.objects.filter(state=DeliveryState.PENDING).count() == 0  # paused: nothing queued

    send_test(resume_channel(webhook, actor=team_admin), actor=team_admin)

    assert deliver_due(now) == {DeliveryState.DELIVERED: 1}
    notice.refresh_from_db()
    assert notice.resolved_at is not None
    webhook.refresh_from_db()
    assert webhook.failed_deliveries == 0
