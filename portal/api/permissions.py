from rest_framework.permissions import BasePermission

from billing_app.permissions import can_set_prices
from scheduler_app.models import Node
from scheduler_app.permissions import can_operate


class IsNodeAgent(BasePermission):
    """Only a node's agent credential (NodeCredentialAuthentication), never a user."""

    message = "Only a node's agent credential may do this."

    def has_permission(self, request, view):
        return isinstance(request.auth, Node)


class IsOperator(BasePermission):
    """Platform operators only (scheduler_app.permissions.can_operate)."""

    def has_permission(self, request, view):
        return can_operate(request.user)


class MaySetPrices(BasePermission):
    """Who may price pools (billing_app.permissions.can_set_prices)."""

    def has_permission(self, request, view):
        return can_set_prices(request.user)
