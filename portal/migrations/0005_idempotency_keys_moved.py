# IdempotencyKey now lives in the infra app (infra 0001), on the same table. Forget it here: state only.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0004_idempotency_keys"),
        ("infra", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="IdempotencyKey")],
            database_operations=[],
        ),
    ]
