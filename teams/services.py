"""Writes for teams, membership, secrets and API tokens; each checks who may act and records its change
for the event log (teams.changes.record_change) in the same transaction."""

import datetime as dt
from contextlib import suppress

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from infra.echo import echoed
from teams.changes import record_change
from teams.choices import Role
from teams.constants import IDLE_MINUTES_MAX, IDLE_MINUTES_MIN, MAX_SECRETS_PER_TEAM, TEAM_SECRET_MIN_CHARS
from teams.crypto import encrypt
from teams.environment import name_problem, value_problem
from teams.models import ApiToken, Membership, Team, TeamSecret, UserUnixAccount, validate_unix_account
from teams.permissions import (
    can_manage_secrets,
    can_manage_team,
    can_map_unix_accounts,
    can_revoke_token,
    require,
)
from teams.selectors import user_teams
from teams.tokens import hash_token, new_token

MAX_TOKEN_LIFETIME = dt.timedelta(days=365)
# Writing last_used_at on every API call would turn each read into a write.
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)
# Seconds a usable token and its user stay in the shared cache (see user_for_api_token).
TOKEN_CACHE_S = 60


def _require_manager(user, team: Team) -> None:
    require(
        can_manage_team(user, team), f"Only team admins of {team.name} (or operators) can manage its members."
    )


def add_member(team: Team, *, username: str, role: str = Role.MEMBER, actor) -> Membership:
    _require_manager(actor, team)
    if role not in Role.values:
        raise ValidationError(
            {"role": f"{echoed(role)!r} is not a role; choose from {', '.join(Role.values)}."}
        )
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValidationError({"username": f"No user named {echoed(username)!r}."})
    if Membership.objects.filter(team=team, user=user).exists():
        raise ValidationError({"username": f"{username} is already a member of {team.name}."})
    with transaction.atomic():
        membership = Membership.objects.create(team=team, user=user, role=role)
        record_change(membership, role, actor=actor, team=team, reason=f"{username} added")
    return membership


def change_role(membership: Membership, *, role: str, actor) -> Membership:
    _require_manager(actor, membership.team)
    if role not in Role.values:
        raise ValidationError(
            {"role": f"{echoed(role)!r} is not a role; choose from {', '.join(Role.values)}."}
        )
    with transaction.atomic():
        locked = Membership.objects.select_for_update().get(pk=membership.pk)
        if locked.role == Role.TEAM_ADMIN and role != Role.TEAM_ADMIN:
            _keep_one_admin(locked)
        from_role, locked.role = locked.role, role
        locked.save(update_fields=["role"])
        record_change(
            locked, role, from_state=from_role, actor=actor, team=locked.team, reason=f"{locked.user} role"
        )
    return locked


def remove_member(membership: Membership, *, actor) -> None:
    _require_manager(actor, membership.team)
    with transaction.atomic():
        if membership.role == Role.TEAM_ADMIN:
            _keep_one_admin(membership)
        record_change(
            membership,
            "removed",
            from_state=membership.role,
            actor=actor,
            team=membership.team,
            reason=f"{membership.user} removed",
        )
        membership.delete()


def _keep_one_admin(membership: Membership) -> None:
    admins = Membership.objects.filter(team=membership.team, role=Role.TEAM_ADMIN).exclude(pk=membership.pk)
    if not admins.exists():
        raise ValidationError({"role": f"{membership.team.name} must keep at least one team admin."})


def create_api_token(user, *, name: str, expires_at: dt.datetime) -> tuple[ApiToken, str]:
    """A new token for `user`; the returned secret is shown once and never stored."""
    now = timezone.now()
    errors = {}
    if not name.strip():
        errors["name"] = "Give the token a name, to recognise it later."
    if expires_at <= now:
        errors["expires_at"] = "The expiry must be in the future."
    elif expires_at > now + MAX_TOKEN_LIFETIME:
        errors["expires_at"] = "Tokens live at most 365 days."
    if errors:
        raise ValidationError(errors)
    secret = new_token("gpp")
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:100],
        prefix=secret[:10],
        token_hash=hash_token(secret),
        expires_at=expires_at,
    )
    return token, secret


def revoke_api_token(token: ApiToken, *, user) -> ApiToken:
    require(can_revoke_token(user, token), "You can revoke only your own tokens.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def user_for_api_token(secret: str):
    """The user a token acts as, or None when it is unknown, expired or revoked.

    A usable token is remembered with its user and the user's teams in the shared cache for
    TOKEN_CACHE_S, so most API calls read no token or membership row; revoking a token or changing
    its user, the user's memberships or one of their teams forgets it (teams.receivers).
    """
    now = timezone.now()
    token_hash = hash_token(secret)
    token = _remembered_token(token_hash)
    if token is None:
        token = ApiToken.objects.usable(now).select_related("user").filter(token_hash=token_hash).first()
        if token is None:
            return None
        _remember_token(token)
    if token.revoked_at is not None or token.expires_at <= now or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
        _remember_token(token)
    return token.user


def forget_api_tokens(token_hashes: list[str]) -> None:
    """Drop these tokens from the cache: their next use reads the database again."""
    with suppress(RedisError):  # Redis away: the entries it holds expire on their own
        cache.delete_many([_token_key(token_hash) for token_hash in token_hashes])


def _token_key(token_hash: str) -> str:
    return f"api-token:{token_hash}"


def _remembered_token(token_hash: str) -> ApiToken | None:
    with suppress(RedisError):
        return cache.get(_token_key(token_hash))
    return None


def _remember_token(token: ApiToken) -> None:
    user_teams(token.user)  # remembered with the user, so the entry also answers team_for_submit
    with suppress(RedisError):
        cache.set(_token_key(token.token_hash), token, TOKEN_CACHE_S)


def set_idle_policy(team: Team, *, release: bool, idle_minutes: int | None, util_percent: int, actor) -> Team:
    """The team's idle policy: cards under `util_percent` % with no terminal input or kernel run for
    `idle_minutes` (None: the site's TELEMETRY_IDLE_AFTER_S) are idle; interactive work is then stopped,
    batch work noticed and, with `release`, released. Team admins; each change logged on the team."""
    require(
        can_manage_team(actor, team), f"Only team admins of {team.name} (or operators) can set its policy."
    )
    errors = {}
    if idle_minutes is not None and not IDLE_MINUTES_MIN <= idle_minutes <= IDLE_MINUTES_MAX:
        errors["idle_minutes"] = f"Between {IDLE_MINUTES_MIN} and {IDLE_MINUTES_MAX} minutes, or blank."
    if not 1 <= util_percent <= 100:
        errors["idle_util_percent"] = "A utilization between 1 and 100 %."
    if errors:
        raise ValidationError(errors)
    values = {
        "release_idle_allocations": release,
        "idle_minutes": idle_minutes,
        "idle_util_percent": util_percent,
    }
    return _set_team_fields(team, values, actor=actor, reason="idle work policy")


def set_team_unix_account(team: Team, *, unix_account: str, actor) -> Team:
    """Map the team's jobs to an existing Unix account on the nodes; "" goes back to the identity each
    node's agent creates for the team. Operators only; a change is logged on the team."""
    require(can_map_unix_accounts(actor), "Only platform operators map teams to Unix accounts.")
    _check_unix_account(unix_account)
    return _set_team_field(
        team,
        "unix_account",
        unix_account,
        actor=actor,
        reason="Unix account of its jobs",
        shown=_none_if_blank,
    )


def _set_team_field(team: Team, name: str, value, *, actor, reason: str, shown=lambda value: value) -> Team:
    """Set one field of the team (as _set_team_fields)."""
    return _set_team_fields(team, {name: value}, actor=actor, reason=reason, shown=shown)


def _set_team_fields(team: Team, values: dict, *, actor, reason: str, shown=lambda value: value) -> Team:
    """Set fields of the team under its row lock and log the changes on the team in one Event, with the
    values as `shown` gives them; values it already has change nothing."""
    with transaction.atomic():
        locked = Team.objects.select_for_update().get(pk=team.pk)
        changed = {}
        for name, value in values.items():
            before = getattr(locked, name)
            if before != value:
                setattr(locked, name, value)
                changed[name] = {"from": shown(before), "to": shown(value)}
        if changed:
            locked.save(update_fields=list(changed))
            record_change(locked, "updated", actor=actor, team=locked, reason=reason, data=changed)
    team.refresh_from_db()
    return team


def set_team_secret(team: Team, *, name: str, value: str, actor) -> tuple[TeamSecret, bool]:
    """Create or replace the team's secret `name` (True: created), stored encrypted. Its name follows
    the rule of a job's variables (teams.environment); the audit event names it, never its value."""
    require(can_manage_secrets(actor, team), f"Only team admins of {team.name} can set its secrets.")
    errors = {}
    if problem := name_problem(name):
        errors["name"] = [problem]
    if problem := value_problem(value):
        errors["value"] = [problem[0].upper() + problem[1:]]
    elif len(value) < TEAM_SECRET_MIN_CHARS:
        errors["value"] = [
            f"A secret has at least {TEAM_SECRET_MIN_CHARS} characters, so that masking it in job logs "
            "hides it without hiding ordinary text."
        ]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        locked = Team.objects.select_for_update().get(pk=team.pk)  # one writer of the team's secrets
        secret = TeamSecret.objects.filter(team=locked, name=name).first()
        created = secret is None
        if created:
            if TeamSecret.objects.filter(team=locked).count() >= MAX_SECRETS_PER_TEAM:
                raise ValidationError(
                    {
                        "name": f"{team.name} has {MAX_SECRETS_PER_TEAM} secrets, the most a team may have; "
                        "delete one first."
                    }
                )
            secret = TeamSecret(team=locked, name=name)
        secret.encrypted_value = encrypt(value)
        secret.updated_by = actor
        secret.save()
        record_change(
            secret,
            "created" if created else "replaced",
            actor=actor,
            team=locked,
            reason=f"secret {name} set",
            data={"name": name},
        )
    return secret, created


def delete_team_secret(secret: TeamSecret, *, actor) -> None:
    """Delete the secret: jobs placed from now on no longer get it."""
    team = secret.team
    require(can_manage_secrets(actor, team), f"Only team admins of {team.name} can delete its secrets.")
    with transaction.atomic():
        locked = Team.objects.select_for_update().get(pk=team.pk)
        deleted, _ = TeamSecret.objects.filter(pk=secret.pk).delete()
        if deleted:  # a second delete at the same time found it gone: nothing to log twice
            record_change(
                secret,
                "deleted",
                actor=actor,
                team=locked,
                reason=f"secret {secret.name} deleted",
                data={"name": secret.name},
            )


def _none_if_blank(unix_account: str) -> str | None:
    """An unmapped account reads "none" in the audit log rather than an empty value."""
    return unix_account or None


def set_user_unix_account(user, *, unix_account: str, actor) -> str:
    """Map the user's jobs, in every team, to an existing Unix account on the nodes; "" removes the
    mapping (their jobs run as their team's). Operators only; a change is logged on the user.
    Returns the account now mapped ("" for none)."""
    require(can_map_unix_accounts(actor), "Only platform operators map users to Unix accounts.")
    _check_unix_account(unix_account)
    with transaction.atomic():
        get_user_model().objects.select_for_update().get(pk=user.pk)
        mapping = UserUnixAccount.objects.filter(user=user).first()
        before = mapping.unix_account if mapping else ""
        if before == unix_account:
            return unix_account
        if not unix_account:
            mapping.delete()
        else:
            UserUnixAccount.objects.update_or_create(user=user, defaults={"unix_account": unix_account})
        record_change(
            user,
            "updated",
            actor=actor,
            reason="Unix account of their jobs",
            data={"unix_account": {"from": _none_if_blank(before), "to": _none_if_blank(unix_account)}},
        )
    return unix_account


def _check_unix_account(unix_account) -> None:
    if not isinstance(unix_account, str):
        raise ValidationError({"unix_account": "Give the account name as a string."})
    try:
        validate_unix_account(unix_account)
    except ValidationError as error:
        raise ValidationError({"unix_account": error.messages}) from None
