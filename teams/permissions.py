"""Who may act on teams, members and tokens; and the one refusal every app's services raise."""

from django.core.exceptions import PermissionDenied

from teams.choices import Role
from teams.models import ApiToken, Membership, Team


class NotAllowed(PermissionDenied):
    """The actor may not do this; nothing was written (403 on pages and in the API)."""


def require(allowed: bool, message: str) -> None:
    """Raise NotAllowed(message) unless `allowed`: how services apply the can_* answers."""
    if not allowed:
        raise NotAllowed(message)


def is_member(user, team: Team) -> bool:
    if user is None or not user.is_authenticated:
        return False
    return Membership.objects.filter(team=team, user=user).exists()


def can_manage_team(user, team: Team) -> bool:
    """Team admins manage their team's members; operators (staff) manage every team's."""
    if user is None or not user.is_authenticated:
        return False
    return user.is_staff or Membership.objects.filter(team=team, user=user, role=Role.TEAM_ADMIN).exists()


def can_revoke_token(user, token: ApiToken) -> bool:
    """Only the token's own user revokes it."""
    return user is not None and token.user_id == user.pk
