"""Forms of the teams' pages: members, roles, secrets and personal API tokens."""

import datetime as dt

from django import forms
from django.utils import timezone

from infra.forms import ServiceErrorsMixin
from teams.choices import Role
from teams.constants import IDLE_MINUTES_MAX, IDLE_MINUTES_MIN


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


class IdlePolicyForm(ServiceErrorsMixin, forms.Form):
    """A team's idle policy (teams.services.set_idle_policy)."""

    service_fields = {"util_percent": "idle_util_percent"}

    idle_minutes = forms.IntegerField(
        required=False,
        min_value=IDLE_MINUTES_MIN,
        max_value=IDLE_MINUTES_MAX,
        label="Idle after (minutes)",
        help_text="Blank: the site's default.",
    )
    idle_util_percent = forms.IntegerField(min_value=1, max_value=100, label="Under utilization (%)")
    release = forms.BooleanField(required=False, label="Release idle batch work")

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {
            "release": data["release"],
            "idle_minutes": data["idle_minutes"],
            "util_percent": data["idle_util_percent"],
        }
