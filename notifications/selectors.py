"""Reading notification channels and their delivery logs."""

from django.db.models import Prefetch, Q, QuerySet

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
