# The event log moves here from scheduler_app. Its table stays as it is (scheduler_app_event), with
# every row: this only creates its state here; scheduler_app's 0005 removes it there.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def move_content_type(apps, schema_editor, old="scheduler_app", new="audit"):
    """Keep the event model's content type (and so its permissions)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=new, model="event").exists():
        ContentType.objects.filter(app_label=old, model="event").update(app_label=new)


def move_content_type_back(apps, schema_editor):
    move_content_type(apps, schema_editor, old="audit", new="scheduler_app")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("scheduler_app", "0004_pass_state"),
        ("teams", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Event",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("object_id", models.PositiveBigIntegerField()),
                        ("actor_label", models.CharField(help_text="The user, or the system part that acted.", max_length=100)),
                        ("from_state", models.CharField(blank=True, max_length=32)),
                        ("to_state", models.CharField(max_length=32)),
                        ("reason", models.CharField(blank=True, max_length=500)),
                        ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        ("actor", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ("content_type", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to="contenttypes.contenttype")),
                        ("team", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="teams.team")),
                    ],
                    options={
                        "db_table": "scheduler_app_event",
                        "ordering": ["created_at", "id"],
                        "indexes": [models.Index(fields=["content_type", "object_id", "created_at"], name="scheduler_a_content_36ed68_idx")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, move_content_type_back),
    ]
