"""The form of the notification pages: a channel to add. The service validates (the URL's address too);
the form only parses what people type and shows the service's errors on its fields."""

from django import forms

from infra.forms import ServiceErrorsMixin
from notifications.choices import ChannelKind, EventKind
from notifications.constants import NAME_MAX_CHARS, URL_MAX_CHARS
from notifications.services import CHOOSABLE


class ChannelForm(ServiceErrorsMixin, forms.Form):
    kind = forms.ChoiceField(choices=ChannelKind.choices, initial=ChannelKind.WEBHOOK)
    name = forms.CharField(max_length=NAME_MAX_CHARS, help_text="What it is, e.g. “on-call Slack”.")
    url = forms.CharField(
        label="URL",
        required=False,
        max_length=URL_MAX_CHARS,
        strip=False,
        help_text="Webhook and Slack: the http(s) URL to post to, outside the portal's own network.",
    )
    email = forms.CharField(
        label="Email address", required=False, max_length=254, help_text="Email: the address to send to."
    )
    events = forms.MultipleChoiceField(
        label="Event kinds",
        choices=[(kind, EventKind(kind).label) for kind in CHOOSABLE],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every kind.",
    )
