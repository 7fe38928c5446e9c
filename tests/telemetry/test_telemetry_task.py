"""The telemetry upkeep as Celery runs it: scheduled by beat, and a plain call of the task rolls up,
checks and prunes."""

import datetime as dt

from django.conf import settings
from django.utils import timezone

from telemetry.models import GpuRollup, GpuSample
from telemetry.tasks import telemetry_upkeep
from tests.telemetry.telemetry_helpers import plant


def test_beat_schedules_the_upkeep_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["telemetry-upkeep"]

    assert entry == {
        "task": "scheduler_app.telemetry_upkeep",
        "schedule": float(settings.TELEMETRY_INTERVAL_S),
    }
    assert telemetry_upkeep.name == entry["task"]


def test_the_task_rolls_up_and_prunes(make_node):
    gpu = make_node().gpus.first()
    now = timezone.now()
    plant(gpu, now - dt.timedelta(minutes=2), [40, 60])
    plant(gpu, now - dt.timedelta(hours=4), [99])  # past the raw retention (3 h)

    result = telemetry_upkeep()

    assert result["pruned"]["raw"] == 1
    assert result["notices"] == {}
    assert list(GpuSample.objects.values_list("gpu_util_percent", flat=True)) == [40, 60]
    assert GpuRollup.objects.filter(resolution_s=60).count() == 2
    assert sum(GpuRollup.objects.filter(resolution_s=3600).values_list("util_sum", flat=True)) == 100
