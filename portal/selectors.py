from portal.models import Membership, Team


def team_for_member(user, slug: str) -> Team | None:
    """The team with this slug if the user belongs to it, else None (no hint that it exists)."""
    if user is None or not user.is_authenticated:
        return None
    return Team.objects.filter(slug=slug, memberships__user=user).first()


def membership(user, team: Team) -> Membership | None:
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, team=team).first()
