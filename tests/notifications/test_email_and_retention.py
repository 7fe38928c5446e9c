"""An email channel gets each event as a mail; the delivery log is kept NOTIFICATION_RETENTION_DAYS."""

import datetime as dt

from django.conf import settings
from django.core import mail
from django.utils import timezone

from notifications.choices import ChannelKind, DeliveryState, EventKind
from notifications.delivery import deliver_due
from notifications.models import Delivery, DeliveryAttempt
from notifications.retention import prune
from notifications.services import create_channel, send_test
from notifications.tasks import deliver_due_task
from scheduler_app.services.agents import report_finished, report_started


def test_an_email_channel_gets_the_event_as_a_mail(team, team_admin, place, node):
    channel, secret = create_channel(
        team_admin,
        team=team,
        kind=ChannelKind.EMAIL,
        name="oncall",
        email="oncall@example.org",
        events=[EventKind.REQUEST_FAILED],
    )
    request = place("python train.py")

    report_started(node, request.pk)
    report_finished(node, request.pk, exit_code=3)

    assert secret == ""
    assert deliver_due() == {DeliveryState.DELIVERED: 1}
    (sent,) = mail.outbox
    assert sent.to == ["oncall@example.org"]
    assert sent.from_email == settings.DEFAULT_FROM_EMAIL
    assert sent.subject.startswith("[GPU Portal] [Vision] job: Request failed")
    assert sent.body == Delivery.objects.get(channel=channel).payload["text"]
    assert sent.body.endswith("process exited with status 3")
    assert DeliveryAttempt.objects.get().ok


def test_an_email_channels_test_message_says_who_sent_it(team, team_admin):
    channel, _ = create_channel(
        team_admin, team=None, kind=ChannelKind.EMAIL, name="me", email="a@example.org"
    )

    send_test(channel, actor=team_admin)
    deliver_due()

    (sent,) = mail.outbox
    assert sent.subject == f"[GPU Portal] me: Test message — sent by {team_admin.get_username()}"
    assert sent.to == ["a@example.org"]


def test_finished_deliveries_past_their_retention_are_pruned_with_their_attempts(
    webhook, team_admin, settings, receiver
):
    settings.NOTIFICATION_RETENTION_DAYS = 30
    channel = webhook
    for _ in range(3):
        send_test(channel, actor=team_admin)
    deliver_due()
    receiver.statuses = [500]
    failing = send_test(channel, actor=team_admin)
    deliver_due()  # one failed try: pending, with an attempt
    now = timezone.now()
    old, recent, _ = Delivery.objects.filter(state=DeliveryState.DELIVERED)
    Delivery.objects.filter(pk=old.pk).update(finished_at=now - dt.timedelta(days=31))
    Delivery.objects.filter(pk=recent.pk).update(finished_at=now - dt.timedelta(days=29))
    Delivery.objects.filter(pk=failing.pk).update(created_at=now - dt.timedelta(days=90))

    assert prune(now) == 1

    assert not Delivery.objects.filter(pk=old.pk).exists()
    assert not DeliveryAttempt.objects.filter(delivery_id=old.pk).exists()
    assert Delivery.objects.count() == 3  # the recent ones, and the pending one however old
    assert DeliveryAttempt.objects.filter(delivery=failing).count() == 1
    assert prune(now) == 0


def test_the_notifications_scan_prunes(webhook, team_admin, settings):
    settings.NOTIFICATION_RETENTION_DAYS = 7
    send_test(webhook, actor=team_admin)
    deliver_due()
    Delivery.objects.update(finished_at=timezone.now() - dt.timedelta(days=8))

    assert deliver_due_task() == {"pruned": 1}
    assert not Delivery.objects.exists() and not DeliveryAttempt.objects.exists()
