from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from scheduler_app.services.inventory import node_for_agent_token
from teams.services import user_for_api_token


class BearerAuthentication(authentication.BaseAuthentication):
    """Reads `Authorization: Bearer <secret>`; subclasses say what the secret stands for."""

    keyword = "Bearer"
    credential = "token"  # how error messages name the secret

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                _("Give the %s after 'Bearer', with no spaces in it.") % self.credential
            )
        try:
            secret = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                _("The %s has characters it cannot have.") % self.credential
            ) from None
        return self.resolve(secret)

    def resolve(self, secret: str):
        """(user, auth) for a known secret; raise AuthenticationFailed otherwise."""
        raise NotImplementedError

    def authenticate_header(self, request):
        return self.keyword


class ApiTokenAuthentication(BearerAuthentication):
    """`Authorization: Bearer gpp_…` with a personal API token; acts as the token's user."""

    def resolve(self, secret):
        user = user_for_api_token(secret)
        if user is None:
            raise exceptions.AuthenticationFailed(_("Unknown, expired or revoked API token."))
        return user, secret


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
