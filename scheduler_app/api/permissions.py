from rest_framework.permissions import BasePermission

from scheduler_app.models import Node


class IsNodeAgent(BasePermission):
    """Only a node's agent credential (NodeCredentialAuthentication), never a user."""

    message = "Only a node's agent credential may do this."

    def has_permission(self, request, view):
        return isinstance(request.auth, Node)
