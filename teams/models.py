import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from agent.isolation.identity import team_account
from teams.choices import Role
from teams.constants import (
    DEFAULT_UNIX_ACCOUNT_PREFIX,
    IDLE_MINUTES_MAX,
    IDLE_MINUTES_MIN,
    IDLE_UTIL_PERCENT_DEFAULT,
    UNIX_ACCOUNT_MAX_CHARS,
    UNIX_ACCOUNT_PATTERN,
    UNIX_ACCOUNTS_REFUSED,
)


def validate_unix_account(name: str) -> None:
    """A POSIX user name an operator maps jobs to (never root); blank means "no mapping" and is let
    through here, the fields say whether blank is allowed."""
    if len(name) > UNIX_ACCOUNT_MAX_CHARS:
        raise ValidationError(f"A Unix user name has at most {UNIX_ACCOUNT_MAX_CHARS} characters.")
    if name in UNIX_ACCOUNTS_REFUSED:
        raise ValidationError(f"Jobs never run as {name}: name an unprivileged account.")
    if name and not re.fullmatch(UNIX_ACCOUNT_PATTERN, name):
        raise ValidationError(
            "Not a Unix user name: use lower-case letters, digits, '_' and '-', starting with a letter "
            "or '_' (a '$' may end it)."
        )


class Team(models.Model):
    """A group of users who share requests, quotas and a budget."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")
    release_idle_allocations = models.BooleanField(
        default=False,
        help_text="Release running batch work once idle (a notice goes out either way); interactive work "
        "is stopped when idle whatever this says.",
    )
    idle_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(IDLE_MINUTES_MIN), MaxValueValidator(IDLE_MINUTES_MAX)],
        help_text="How long work stays idle before it is noticed (batch) or stopped (interactive); "
        "blank: the site's TELEMETRY_IDLE_AFTER_S.",
    )
    idle_util_percent = models.PositiveSmallIntegerField(
        default=IDLE_UTIL_PERCENT_DEFAULT,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="GPU utilization (%) under which a card counts as idle.",
    )
    unix_account = models.CharField(
        max_length=UNIX_ACCOUNT_MAX_CHARS,
        blank=True,
        validators=[validate_unix_account],
        help_text="The existing Unix account the team's jobs run as on the nodes; blank: the identity "
        "each node's agent creates for the team (gpp-<slug>). Set by operators.",
    )

    class Meta:
        db_table = "portal_team"  # created by the portal app before teams moved here; kept in place
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def idle_seconds(self) -> int:
        """How long its work stays idle before it is noticed or stopped: its own setting or the site's."""
        return self.idle_minutes * 60 if self.idle_minutes else settings.TELEMETRY_IDLE_AFTER_S

    def default_unix_account(self) -> str:
        """The identity a node's agent creates for the team when no account is mapped (by the agent's
        own rule: shortened, with a digest, past a user name's 32 characters)."""
        return team_account(DEFAULT_UNIX_ACCOUNT_PREFIX, self.slug)


class UserUnixAccount(models.Model):
    """An existing Unix account a user's jobs run as on the nodes, in every team of theirs; a user
    without one runs as their team's. Set by operators (teams.services.set_user_unix_account)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="unix_mapping"
    )
    unix_account = models.CharField(max_length=UNIX_ACCOUNT_MAX_CHARS, validators=[validate_unix_account])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["user__username"]
        verbose_name = "user's Unix account"

    def __str__(self) -> str:
        return f"{self.user} runs as {self.unix_account}"


class Membership(models.Model):
    """A user's place in a team; team admins manage the team's members."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "portal_membership"
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user"),
            models.CheckConstraint(condition=models.Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.get_role_display()})"

    def is_team_admin(self) -> bool:
        return self.role == Role.TEAM_ADMIN


class ApiTokenQuerySet(models.QuerySet):
    def usable(self, now):
        return self.filter(revoked_at__isnull=True, expires_at__gt=now)


class ApiToken(models.Model):
    """A personal API token: acts as its user until it expires or is revoked. Only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="The first characters, to tell tokens apart.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        db_table = "portal_apitoken"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    def is_usable(self, now) -> bool:
        return self.revoked_at is None and self.expires_at > now


class TeamSecret(models.Model):
    """A named value the team's jobs get as an environment variable. Stored encrypted (teams.crypto);
    after it is set it is never shown again, only its name and who last set it when."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=128)
    encrypted_value = models.TextField(editable=False, help_text="A Fernet token under TEAM_SECRETS_KEYS.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="teamsecret_unique_team_name"),
        ]

    def __str__(self) -> str:
        return f"secret {self.name} of {self.team_id}"
