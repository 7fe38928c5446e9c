"""Who may see and manage notification channels: a team's channels are its admins' to manage and its
members' to see; a user's channels are theirs alone. Operators get no say (they run the platform, not
the teams' alerting), as with team secrets."""

from teams.choices import Role
from teams.models import Membership, Team
from teams.permissions import is_member


def can_add_channel(user, team: Team | None) -> bool:
    if user is None or not user.is_authenticated:
        return False
    if team is None:
        return True
    return Membership.objects.filter(team=team, user=user, role=Role.TEAM_ADMIN).exists()


def can_manage_channel(user, channel) -> bool:
    if channel.user_id is not None:
        return user is not None and user.is_authenticated and channel.user_id == user.pk
    return can_add_channel(user, channel.team)


def can_view_channel(user, channel) -> bool:
    if channel.user_id is not None:
        return can_manage_channel(user, channel)
    return is_member(user, channel.team)


def team_rights(user, team: Team) -> tuple[bool, bool]:
    """(may see the team's channels, may add and manage them), from one query: the team page's section."""
    if user is None or not user.is_authenticated:
        return False, False
    role = Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()
    return role is not None, role == Role.TEAM_ADMIN
