from rest_framework.permissions import BasePermission

from billing_app.permissions import can_set_prices


class MaySetPrices(BasePermission):
    """Who may price pools (billing_app.permissions.can_set_prices)."""

    def has_permission(self, request, view):
        return can_set_prices(request.user)
