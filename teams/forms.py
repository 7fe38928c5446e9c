"""Forms of the teams' pages: members, roles, secrets and personal API tokens."""

import datetime as dt

from django import forms
from django.utils import timezone

from infra.forms import ServiceErrorsMixin
from teams.choices import Role


class ApiTokenForm(ServiceErrorsMixin, forms.Form):
    service_fields = {"expires_at": "days"}

    name = forms.CharField(max_length=100, required=False, help_text="Where it is used, e.g. “laptop CLI”.")
    days = forms.IntegerField(initial=30, label="Expires in (days)", help_text="At most 365.")

    def service_kwargs(self) -> dict:
        expires_at = timezone.now() + dt.timedelta(days=self.cleaned_data["days"])
        return {"name": self.cleaned_data["name"], "expires_at": expires_at}


class AddMemberForm(ServiceErrorsMixin, forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class TeamSecretForm(ServiceErrorsMixin, forms.Form):
    """A secret to add or replace; the value is never rendered back, not even after an error."""

    name = forms.CharField(max_length=128, help_text="The variable the team's jobs get, e.g. WANDB_API_KEY.")
    value = forms.CharField(
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
        help_text="4 to 4,096 characters; stored encrypted, never shown again, masked in job logs.",
    )


class RoleForm(ServiceErrorsMixin, forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
