"""Bearer-secret authentication for the API: the header parsing every credential shares."""

from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions


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
