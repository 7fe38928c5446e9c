from django.db import models


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    TEAM_ADMIN = "team_admin", "Team admin"
