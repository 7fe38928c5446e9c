"""Who may act on teams, members, secrets and tokens; and the one refusal every app's services raise."""

from django.core.exceptions import PermissionDenied

from teams.choices import Role
from teams.models import ApiToken, Membership, Team


class NotAllowed(PermissionDenied):
    """The actor may not do this; nothing was written (403 on pages and in the API)."""


def can_operate(user) -> bool:
    """Platform operators (staff) manage nodes, pools, quotas and prices."""
    return user is not None and user.is_authenticated and user.is_staff


def require(allowed: bool, message: str) -> None:
    """Raise NotAllowed(message) unless `allowed`: how services apply the can_* answers."""
    if not allowed:
        raise NotAllowed(message)


def is_member(user, team: Team) -> bool:
    """Remembered on the user object for the rest of its request, as Django remembers a user's
    permissions (`_perm_cache`): a request asks about the same team more than once."""
    if user is None or not user.is_authenticated:
        return False
    known = user.__dict__.setdefault("_member_of", {})
    if team.pk not in known:
        known[team.pk] = Membership.objects.filter(team=team, user=user).exists()
    return known[team.pk]


def note_membership(user, team: Team) -> None:
    """Record what a query through the user's memberships just proved (see is_member)."""
    user.__dict__.setdefault("_member_of", {})[team.pk] = True


def can_manage_team(user, team: Team) -> bool:
    """Team admins manage their team's members; operators (staff) manage every team's."""
    if user is None or not user.is_authenticated:
        return False
    return user.is_staff or Membership.objects.filter(team=team, user=user, role=Role.TEAM_ADMIN).exists()


def can_manage_secrets(user, team: Team) -> bool:
    """Only the team's own admins set and delete its secrets: an operator runs the platform, not the
    team's jobs, and gets no say over what they are given."""
    if user is None or not user.is_authenticated:
        return False
    return Membership.objects.filter(team=team, user=user, role=Role.TEAM_ADMIN).exists()


def can_map_unix_accounts(user) -> bool:
    """Operators (staff) choose the Unix accounts jobs run as on the nodes: who owns the files there."""
    return user is not None and user.is_authenticated and user.is_staff


def can_revoke_token(user, token: ApiToken) -> bool:
    """Only the token's own user revokes it."""
    return user is not None and token.user_id == user.pk
