import datetime as dt

from rest_framework import serializers

from infra.api.fields import StrictBooleanField, StrictCharField, StrictChoiceField, StrictIntegerField
from teams.choices import Role
from teams.constants import IDLE_MINUTES_MAX, IDLE_MINUTES_MIN, UNIX_ACCOUNT_MAX_CHARS
from teams.models import ApiToken, Membership, Team, TeamSecret

UNIX_ACCOUNT_HELP = (
    "The existing Unix account the team's jobs run as on the nodes (a member's own mapping comes "
    "first); empty: the identity each node's agent creates for the team, gpp-<slug>."
)


class TeamSerializer(serializers.ModelSerializer):
    slug = serializers.CharField(source="team.slug")
    name = serializers.CharField(source="team.name")
    unix_account = serializers.CharField(source="team.unix_account", help_text=UNIX_ACCOUNT_HELP)

    class Meta:
        model = Membership
        fields = ["slug", "name", "role", "unix_account"]


class TeamDetailSerializer(serializers.ModelSerializer):
    unix_account = serializers.CharField(help_text=UNIX_ACCOUNT_HELP)

    class Meta:
        model = Team
        fields = ["slug", "name", "unix_account"]


class IdlePolicySerializer(serializers.Serializer):
    """When the team's work is idle and what then happens to it (teams.services.set_idle_policy)."""

    idle_minutes = StrictIntegerField(
        allow_null=True,
        min_value=IDLE_MINUTES_MIN,
        max_value=IDLE_MINUTES_MAX,
        help_text="Idle after this many minutes under the threshold with no input; null: the site's default.",
    )
    idle_util_percent = StrictIntegerField(
        min_value=1, max_value=100, help_text="Cards under this utilization (%) count as idle."
    )
    release_idle_allocations = StrictBooleanField(
        help_text="Idle batch work is released too (interactive work is always stopped, after a warning)."
    )
    effective_idle_minutes = serializers.SerializerMethodField(
        help_text="The idle time in force: idle_minutes, or the site's default."
    )

    def get_effective_idle_minutes(self, team) -> int:
        return team.idle_seconds() // 60


class UnixAccountSerializer(serializers.Serializer):
    """An operator's mapping to an existing Unix account: a POSIX user name, never root."""

    unix_account = StrictCharField(
        max_length=UNIX_ACCOUNT_MAX_CHARS,
        allow_blank=True,
        trim_whitespace=False,
        help_text="A POSIX user name ([a-z_][a-z0-9_-]*, a '$' may end it), at most 32 characters, "
        "never root; empty removes the mapping.",
    )


class UserUnixAccountSerializer(serializers.Serializer):
    username = serializers.CharField()
    unix_account = serializers.CharField(
        help_text="The account the user's jobs run as, in every team; empty: their team's."
    )


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["id", "username", "role", "joined_at"]


class NewMemberSerializer(serializers.Serializer):
    username = StrictCharField(min_length=1, max_length=150)
    role = StrictChoiceField(choices=Role.choices, default=Role.MEMBER)


class RoleSerializer(serializers.Serializer):
    role = StrictChoiceField(choices=Role.choices)


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]


class NewApiTokenSerializer(serializers.Serializer):
    name = StrictCharField(min_length=1, max_length=100)
    expires_in_days = StrictIntegerField(min_value=1, max_value=365, default=90)

    def expiry(self, now: dt.datetime) -> dt.datetime:
        return now + dt.timedelta(days=self.validated_data["expires_in_days"])


class CreatedApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="The secret: shown this once, never again.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class TeamSecretSerializer(serializers.ModelSerializer):
    """A secret as anyone in the team sees it: its name and who last set it when, never its value."""

    updated_by = serializers.CharField(source="updated_by.username", allow_null=True, default=None)

    class Meta:
        model = TeamSecret
        fields = ["name", "created_at", "updated_at", "updated_by"]


class SetTeamSecretSerializer(serializers.Serializer):
    value = StrictCharField(
        trim_whitespace=False,
        allow_blank=True,  # the service says how long a secret must be
        write_only=True,
        help_text="4 to 4,096 characters; stored encrypted, never shown again.",
    )
