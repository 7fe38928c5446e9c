"""Who may act on notices: one module for the pages, the API and the services."""

from audit.models import Notice
from teams.choices import Role
from teams.models import Membership
from teams.permissions import is_member


def can_dismiss_notice(user, notice: Notice) -> bool:
    """A member of the notice's team puts it away for themselves."""
    return is_member(user, notice.team)


def can_acknowledge_notice(user, notice: Notice) -> bool:
    """A team admin of the notice's team acknowledges it for the whole team: it leaves every member's list.
    Remembered per team on the user object for the rest of its request, as is_member is: a page lists
    several notices of one team."""
    if user is None or not user.is_authenticated:
        return False
    known = user.__dict__.setdefault("_admin_of", {})
    if notice.team_id not in known:
        known[notice.team_id] = Membership.objects.filter(
            team_id=notice.team_id, user=user, role=Role.TEAM_ADMIN
        ).exists()
    return known[notice.team_id]
