"""Forget cached API tokens (teams.services.user_for_api_token) whenever a token, its user, the
user's memberships or one of their teams changes, whichever path changed it: the pages, the API,
the admin. Each is forgotten at once and again after the change commits: a call that read the rows
in between would otherwise cache what is about to change for TOKEN_CACHE_S. After the commit the
sessions a token holds open (scheduler_app.live.sessions) are told, and close unless still allowed.
A browser's sign-out likewise closes the terminals its sign-in opened."""

from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from infra.live import login_group, send_to_groups, token_group
from teams.models import ApiToken, Membership, Team
from teams.services import forget_api_tokens


def _forget(token_hashes: list[str]) -> None:
    if token_hashes:
        forget_api_tokens(token_hashes)
        transaction.on_commit(lambda: _forget_and_tell(token_hashes))


def _forget_and_tell(token_hashes: list[str]) -> None:
    """The websockets these tokens hold open ask again whether they may stay (a revoked token's close)."""
    forget_api_tokens(token_hashes)
    send_to_groups([(token_group(token_hash), {"type": "token.changed"}) for token_hash in token_hashes])


def _forget_tokens_of(user_ids) -> None:
    _forget(list(ApiToken.objects.filter(user_id__in=user_ids).values_list("token_hash", flat=True)))


@receiver([post_save, post_delete], sender=ApiToken)
def forget_changed_token(sender, instance: ApiToken, **kwargs) -> None:
    _forget([instance.token_hash])


@receiver([post_save, post_delete], sender=settings.AUTH_USER_MODEL)
def forget_tokens_of_changed_user(sender, instance, created=False, update_fields=None, **kwargs) -> None:
    if created or update_fields == frozenset({"last_login"}):  # a sign-in changes nothing tokens use
        return
    _forget_tokens_of([instance.pk])


@receiver([post_save, post_delete], sender=Membership)
def forget_tokens_of_changed_member(sender, instance: Membership, **kwargs) -> None:
    _forget_tokens_of([instance.user_id])


@receiver(post_save, sender=Team)
def forget_tokens_of_changed_teams_members(sender, instance: Team, created=False, **kwargs) -> None:
    # (A team deleted takes its memberships with it, and each of those is forgotten on its own.)
    if not created:
        _forget_tokens_of(Membership.objects.filter(team=instance).values("user_id"))


@receiver(user_logged_out)
def close_terminals_of_sign_in(sender, request, user, **kwargs) -> None:
    """Signing out ends the browser's terminals at once (their socket holds no token to revoke)."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        send_to_groups([(login_group(session_key), {"type": "login.ended"})])
