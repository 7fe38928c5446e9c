from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from portal.services import user_for_api_token
from scheduler_app.services import node_for_agent_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gpp_…` with a personal API token; acts as the token's user."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Give the token after 'Bearer', with no spaces in it."))
        try:
            secret = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("The token has characters it cannot have.")) from None
        user = user_for_api_token(secret)
        if user is None:
            raise exceptions.AuthenticationFailed(_("Unknown, expired or revoked API token."))
        return user, secret

    def authenticate_header(self, request):
        return self.keyword


class NodeCredentialAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer node_…` with a node's agent credential.

    Yields no user: request.user is anonymous and request.auth is the Node, so
    every user endpoint (IsAuthenticated) refuses a node credential and only
    views that take this class and IsNodeAgent accept one.
    """

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                _("Give the credential after 'Bearer', with no spaces in it.")
            )
        try:
            secret = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                _("The credential has characters it cannot have.")
            ) from None
        node = node_for_agent_token(secret)
        if node is None:
            raise exceptions.AuthenticationFailed(
                _("Unknown node credential: this endpoint takes a node's agent credential (node_…).")
            )
        return AnonymousUser(), node

    def authenticate_header(self, request):
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal API token (gpp_…)."}


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    target_class = NodeCredentialAuthentication
    name = "nodeCredential"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A node's agent credential (node_…), given once when the node is registered.",
        }
