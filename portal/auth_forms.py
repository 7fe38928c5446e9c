"""The sign-in forms of the portal's login page and the admin's: both throttled (infra.login_throttle)."""

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from infra import login_throttle


class ThrottledSignInMixin:
    """Counts the attempt before any password is checked and refuses it, unauthenticated, while locked."""

    def clean(self):
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        if username is None or not password:
            return super().clean()  # a missing field is reported, and nothing is authenticated
        attempt = login_throttle.begin(username, self.request.META.get("REMOTE_ADDR", ""))
        if attempt.refusal:
            raise ValidationError(attempt.refusal, code="throttled")
        cleaned = super().clean()  # a wrong password raises here and the attempt stays counted
        login_throttle.succeeded(attempt)
        return cleaned


class SignInForm(ThrottledSignInMixin, AuthenticationForm):
    """/accounts/login/."""


class AdminSignInForm(ThrottledSignInMixin, AdminAuthenticationForm):
    """/admin/login/: staff only, as Django's admin form."""
