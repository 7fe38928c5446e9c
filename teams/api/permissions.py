from rest_framework.permissions import BasePermission

from teams.permissions import can_operate


class IsOperator(BasePermission):
    """Platform operators only (teams.permissions.can_operate)."""

    def has_permission(self, request, view):
        return can_operate(request.user)
