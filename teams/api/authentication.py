"""API authentication with a personal API token (gpp_…), as the OpenAPI schema names it."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions

from infra.api.authentication import BearerAuthentication
from teams.services import user_for_api_token


class ApiTokenAuthentication(BearerAuthentication):
    """`Authorization: Bearer gpp_…` with a personal API token; acts as the token's user."""

    def resolve(self, secret):
        user = user_for_api_token(secret)
        if user is None:
            raise exceptions.AuthenticationFailed(_("Unknown, expired or revoked API token."))
        return user, secret


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal API token (gpp_…)."}
