"""Which live streams a page follows: the pages name them; the consumers decide who may connect."""

from teams.permissions import can_operate

CLUSTER_STREAM = "/ws/cluster/"


def team_stream(slug: str) -> str:
    return f"/ws/teams/{slug}/events/"


def stream_paths(user, team=None) -> list[str]:
    """A team's page follows that team's stream when the user is in it; operators otherwise follow the
    cluster-wide one; a member, each of their teams' (the cards and pools are the same in every one)."""
    slugs = list(user.memberships.order_by("team__name").values_list("team__slug", flat=True))
    if team is not None and team.slug in slugs:
        slugs = [team.slug]
    elif can_operate(user):
        return [CLUSTER_STREAM]
    return [team_stream(slug) for slug in slugs]
