"""Reading notification channels and their delivery logs."""

from django.db.models import Prefetch, Q, QuerySet

from notifications.choices import DeliveryState
from notifications.constants import LOG_LENGTH
from notifications.models import Channel, Delivery, DeliveryAttempt


def channels_visible_to(user) -> QuerySet[Channel]:
    """The user's own channels and those of the teams they belong to (an operator sees no other team's)."""
    return (
        Channel.objects.filter(Q(user=user) | Q(team__memberships__user=user))
        .distinct()
        .select_related("team", "user")
    )


def delivery_log(channel: Channel, limit: int = LOG_LENGTH) -> list[Delivery]:
    """The channel's newest deliveries, each with its tries (newest first)."""
    tries = Prefetch("tries", queryset=DeliveryAttempt.objects.order_by("-number"))
    return list(channel.deliveries.order_by("-created_at").prefetch_related(tries)[:limit])


def attempt_log(channel: Channel, limit: int = LOG_LENGTH) -> list[DeliveryAttempt]:
    """The channel's newest tries, each with its delivery (the event kind): its page's delivery log."""
    return list(
        DeliveryAttempt.objects.filter(delivery__channel=channel)
        .select_related("delivery")
        .order_by("-started_at", "-id")[:limit]
    )


def waiting_count(channel: Channel) -> int:
    """Its deliveries still to be sent (a first try or a retry)."""
    return channel.deliveries.filter(state=DeliveryState.PENDING).count()
