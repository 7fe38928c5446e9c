# Team, Membership and ApiToken now live in the teams app (teams 0001), on the same tables; every
# foreign key to them points there (scheduler_app 0005). Forget them here: state only.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("portal", "0002_api_tokens"),
        ("teams", "0001_initial"),
        ("scheduler_app", "0005_teams_and_audit_move"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ApiToken"),
                migrations.RemoveField(model_name="team", name="members"),
                migrations.DeleteModel(name="Membership"),
                migrations.DeleteModel(name="Team"),
            ],
            database_operations=[],
        ),
    ]
