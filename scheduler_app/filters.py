"""The filters of the request list and of the cluster's nodes, each one for the page and the API alike."""

from django.core.exceptions import ValidationError
from django_filters import CharFilter, ChoiceFilter, FilterSet, ModelChoiceFilter
from django_filters.fields import ChoiceField

from scheduler_app.choices import NodeStatus, RequestState, TaskType
from scheduler_app.models import GpuRequest, Node, Pool
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
