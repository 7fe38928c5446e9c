import logging
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from infra.echo import echoed
from teams.crypto import InvalidToken, decrypt
from teams.models import Membership, Team, TeamSecret, UserUnixAccount
from teams.permissions import note_membership

logger = logging.getLogger(__name__)


def team_for_member(user, slug: str) -> Team | None:
    """The team with this slug if the user belongs to it, else None (no hint that it exists)."""
    if user is None or not user.is_authenticated:
        return None
    return Team.objects.filter(slug=slug, memberships__user=user).first()


def membership(user, team: Team) -> Membership | None:
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, team=team).first()


def user_teams(user) -> list[Team]:
    """The user's teams, by name. Remembered on the user object, and an API token's cache entry
    carries that object (teams.services.user_for_api_token), so most API calls read no membership."""
    teams = user.__dict__.get("_teams")
    if teams is None:
        teams = user.__dict__["_teams"] = list(Team.objects.filter(memberships__user=user))
    return teams


def team_for_submit(user, slug: str) -> Team:
    """The team a request is for: the named one among the user's, or their only team.

    Raises ValidationError naming `team` otherwise, so the API and pages say the same.
    """
    mine = user_teams(user)
    if slug:
        team = next((team for team in mine if team.slug == slug), None)
        if team is None:
            raise ValidationError({"team": f"You are in no team {echoed(slug)!r}."})
    elif len(mine) == 1:
        team = mine[0]
    else:
        problem = "Name the team: you are in several." if mine else "You are in no team."
        raise ValidationError({"team": problem})
    note_membership(user, team)
    return team


def teams_visible_to(user) -> QuerySet[Team]:
    """The user's teams; operators (staff) see every team."""
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user)


def sole_team(user, teams: list[Team]) -> Team | None:
    """The team of a member of just one (an index of teams opens its page at once); None for operators
    and for members of several."""
    return teams[0] if len(teams) == 1 and not user.is_staff else None


def team_members(team: Team) -> QuerySet[Membership]:
    """The team's members with each one's own Unix account mapping, if any (job_unix_account)."""
    return team.memberships.select_related("user__unix_mapping").order_by("user__username")


def team_secrets(team: Team) -> QuerySet[TeamSecret]:
    """The team's secrets by name, with who last set each; never their values (not even encrypted)."""
    return team.secrets.select_related("updated_by").defer("encrypted_value").order_by("name")


def secret_values(team_ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """{team id: {name: decrypted value}} for these teams, in one query: what their jobs are given, and
    what their logs are masked for. A secret no key of TEAM_SECRETS_KEYS opens (its key was dropped)
    is left out and logged: the job runs without it rather than the node getting no work at all."""
    values: dict[int, dict[str, str]] = {}
    rows = TeamSecret.objects.filter(team_id__in=set(team_ids)).values_list(
        "team_id", "name", "encrypted_value"
    )
    for team_id, name, token in rows.order_by("team_id", "name"):
        try:
            values.setdefault(team_id, {})[name] = decrypt(token)
        except InvalidToken:
            logger.error(
                "team %s: secret %s cannot be decrypted with TEAM_SECRETS_KEYS; left out", team_id, name
            )
    return values


def own_unix_account(user) -> str:
    """The Unix account an operator mapped the user to ("" for none). Read from `user` when it was
    loaded with its mapping (select_related("unix_mapping")), else in one query."""
    mapping = getattr(user, "unix_mapping", None)  # RelatedObjectDoesNotExist is an AttributeError
    return mapping.unix_account if mapping else ""


def job_unix_account(user, team: Team) -> str:
    """The Unix account a job of `user` in `team` runs as on a node: the user's own mapping, else the
    team's, else "" (the identity the node's agent creates for the team)."""
    return own_unix_account(user) or team.unix_account


def user_unix_accounts() -> QuerySet[UserUnixAccount]:
    """Every user's own mapping, by username: the operators' Unix identities page."""
    return UserUnixAccount.objects.select_related("user").order_by("user__username")
