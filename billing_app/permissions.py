"""Who may change prices (platform operators only) and accept a resize offered to running work."""

from billing_app.choices import ResizeState
from scheduler_app.choices import RequestState
from scheduler_app.permissions import can_act_on
from teams.permissions import can_operate


def can_set_prices(user) -> bool:
    return can_operate(user)


def can_accept_resize(user, offer) -> bool:
    """Members of the request's team opt in to a resize offered to it, while it is offered and running."""
    return (
        offer.state == ResizeState.OFFERED
        and offer.request.state == RequestState.RUNNING
        and can_act_on(user, offer.request)
    )
