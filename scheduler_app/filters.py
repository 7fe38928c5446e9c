"""The filters of the request list, the cluster's nodes and the operators' audit log, each one for the
page and the API alike."""

from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.forms import DateInput
from django_filters import CharFilter, ChoiceFilter, DateFilter, FilterSet, ModelChoiceFilter
from django_filters.fields import ChoiceField

from audit.models import Event
from scheduler_app.choices import NodeStatus, RequestState, TaskType
from scheduler_app.models import GpuRequest, Node, Pool
from scheduler_app.selectors import AUDITED
from teams.models import Team
from teams.selectors import teams_visible_to


class GivenChoiceField(ChoiceField):
    """A choice that, once named in the query, must be one of the values: an empty value is refused
    (a client that sends `state=` has lost its value), an absent one means any."""

    def clean(self, value):
        if value is None:
            return ""
        allowed = [str(key) for key, _ in self.choices if key != ""]
        if value not in allowed:
            raise ValidationError(
                "%(value)r is not one of %(allowed)s.",
                code="invalid_choice",
                params={"value": value, "allowed": ", ".join(allowed)},
            )
        return value


class GivenChoiceFilter(ChoiceFilter):
    field_class = GivenChoiceField


def _visible_teams(request):
    return teams_visible_to(request.user)


class GpuRequestFilter(FilterSet):
    """Requests by part of their name, state, team (slug, among those the user sees) and task type.

    Pass `request` (the team choices are the user's). A page form sends every field, an empty one
    meaning any: drop empty values before binding, or the choices refuse them as the API does.
    """

    search = CharFilter(
        field_name="name",
        lookup_expr="icontains",
        label="Name contains",
        help_text="Part of the request name.",
    )
    state = GivenChoiceFilter(
        choices=RequestState.choices, empty_label="Any state", help_text="Only requests in this state."
    )
    team = ModelChoiceFilter(
        queryset=_visible_teams,
        to_field_name="slug",
        empty_label="Any team",
        help_text="Only this team's requests (slug).",
        error_messages={"invalid_choice": "%(value)r is none of your teams."},
    )
    task_type = GivenChoiceFilter(choices=TaskType.choices, empty_label="Any task", label="Task type")

    class Meta:
        model = GpuRequest
        fields: list[str] = []


class ClusterNodeFilter(FilterSet):
    """The cluster's nodes by pool, part of their name and status: one filter for the page and the API."""

    pool = ModelChoiceFilter(
        queryset=Pool.objects.all(),
        to_field_name="name",
        empty_label="Any pool",
        help_text="Only this pool's nodes (its name).",
        error_messages={"invalid_choice": "%(value)r is not a pool."},
    )
    node = CharFilter(
        field_name="name",
        lookup_expr="icontains",
        label="Node name contains",
        help_text="Part of the node name.",
    )
    state = GivenChoiceFilter(
        field_name="status",
        choices=NodeStatus.choices,
        empty_label="Any state",
        help_text="Only nodes in this state.",
    )

    class Meta:
        model = Node
        fields: list[str] = []


def _subject_kinds() -> list[tuple[str, str]]:
    """(content type model name, what people call it) for each kind the audit log shows."""
    models = (*AUDITED, get_user_model())
    return [(model._meta.model_name, model._meta.verbose_name_plural.capitalize()) for model in models]


class AuditEventFilter(FilterSet):
    """The audit log by who acted (part of the user's name, or the system part), what changed (the kind of
    subject), the team concerned and the days (UTC, both included): one filter for the page and the API."""

    who = CharFilter(
        field_name="actor_label", lookup_expr="icontains", label="Who", help_text="Part of the name."
    )
    what = GivenChoiceFilter(
        choices=_subject_kinds,
        method="_of_kind",
        empty_label="Anything",
        label="What",
        help_text="The kind of thing changed.",
    )
    team = ModelChoiceFilter(
        queryset=Team.objects.all(),
        to_field_name="slug",
        method="_of_team",
        empty_label="Any team",
        help_text="Changes to this team, its members and quotas (slug).",
        error_messages={"invalid_choice": "%(value)r is not a team."},
    )
    since = DateFilter(
        field_name="created_at",
        lookup_expr="date__gte",
        label="From (UTC)",
        help_text="YYYY-MM-DD, included.",
        widget=DateInput(attrs={"type": "date"}),
    )
    until = DateFilter(
        field_name="created_at",
        lookup_expr="date__lte",
        label="To (UTC)",
        help_text="YYYY-MM-DD, included.",
        widget=DateInput(attrs={"type": "date"}),
    )

    class Meta:
        model = Event
        fields: list[str] = []

    def _of_kind(self, events, name, value: str):
        return events.filter(content_type__model=value) if value else events

    def _of_team(self, events, name, team: Team):
        """The team's own events and those logged for it (its members, quotas)."""
        if team is None:
            return events
        return events.filter(
            Q(team=team) | Q(content_type=ContentType.objects.get_for_model(Team), object_id=team.pk)
        )
