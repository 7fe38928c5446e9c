"""Who may change prices: platform operators only."""

from scheduler_app.permissions import can_operate


def can_set_prices(user) -> bool:
    return can_operate(user)
