"""API authentication with a node's agent credential (node_…), as the OpenAPI schema names it."""

from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions

from infra.api.authentication import BearerAuthentication
from scheduler_app.services.inventory import node_for_agent_token


class NodeCredentialAuthentication(BearerAuthentication):
    """`Authorization: Bearer node_…` with a node's agent credential.

    Yields no user: request.user is anonymous and request.auth is the Node, so
    every user endpoint (IsAuthenticated) refuses a node credential and only
    views that take this class and IsNodeAgent accept one.
    """

    credential = "credential"

    def resolve(self, secret):
        node = node_for_agent_token(secret)
        if node is None:
            raise exceptions.AuthenticationFailed(
                _("Unknown node credential: this endpoint takes a node's agent credential (node_…).")
            )
        return AnonymousUser(), node


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    target_class = NodeCredentialAuthentication
    name = "nodeCredential"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A node's agent credential (node_…), given once when the node is registered.",
        }
