from django.db import migrations

MODELS = ["gpusample", "nodesample", "allocationsample", "gpurollup"]


def relabel(apps, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    taken = set(ContentType.objects.filter(app_label=new, model__in=MODELS).values_list("model", flat=True))
    ContentType.objects.filter(app_label=old, model__in=set(MODELS) - taken).update(app_label=new)


def forward(apps, schema_editor):
    relabel(apps, "scheduler_app", "telemetry")


def backward(apps, schema_editor):
    relabel(apps, "telemetry", "scheduler_app")


class Migration(migrations.Migration):
    """The moved models' content types follow them (a fresh database has none yet), so the permissions
    granted on them and the admin's history of them stay theirs."""

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("telemetry", "0001_initial"),
    ]

    operations = [migrations.RunPython(forward, backward)]
