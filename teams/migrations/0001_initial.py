# Teams, membership and API tokens move here from portal. Their tables stay as they are
# (portal_team, portal_membership, portal_apitoken): this only creates their state here; portal's
# 0003 removes it there once scheduler_app's foreign keys point here (scheduler_app 0005).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ["team", "membership", "apitoken"]


def move_content_types(apps, schema_editor, old="portal", new="teams"):
    """Keep the content types (and so permissions and event subjects) of the moved models."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not ContentType.objects.filter(app_label=new, model=model).exists():
            ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


def move_content_types_back(apps, schema_editor):
    move_content_types(apps, schema_editor, old="teams", new="portal")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("portal", "0002_api_tokens"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Team",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("slug", models.SlugField(max_length=100, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "portal_team", "ordering": ["name"]},
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("role", models.CharField(choices=[("member", "Member"), ("team_admin", "Team admin")], default="member", max_length=20)),
                        ("joined_at", models.DateTimeField(auto_now_add=True)),
                        ("team", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="teams.team")),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "portal_membership",
                        "ordering": ["team__name", "user__username"],
                        "constraints": [
                            models.UniqueConstraint(fields=("team", "user"), name="membership_unique_team_user"),
                            models.CheckConstraint(condition=models.Q(("role__in", ["member", "team_admin"])), name="membership_role_valid"),
                        ],
                    },
                ),
                migrations.AddField(
                    model_name="team",
                    name="members",
                    field=models.ManyToManyField(related_name="teams", through="teams.Membership", to=settings.AUTH_USER_MODEL),
                ),
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(max_length=100)),
                        ("prefix", models.CharField(help_text="The first characters, to tell tokens apart.", max_length=12)),
                        ("token_hash", models.CharField(editable=False, max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("expires_at", models.DateTimeField()),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="api_tokens", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"db_table": "portal_apitoken", "ordering": ["-created_at", "-id"]},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
