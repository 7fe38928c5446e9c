# Teams moved to the teams app and the event log to the audit app (their tables stay): point the
# foreign keys at teams.Team and forget the Event model here. State only; the database is unchanged.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler_app", "0004_pass_state"),
        ("teams", "0001_initial"),
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="gpurequest",
                    name="team",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="requests", to="teams.team"),
                ),
                migrations.AlterField(
                    model_name="teamquota",
                    name="team",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="quotas", to="teams.team"),
                ),
                migrations.DeleteModel(name="Event"),
            ],
            database_operations=[],
        ),
    ]
