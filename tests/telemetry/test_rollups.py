"""Rollups: raw samples become exact 1-minute and 1-hour sums; a rerun writes the same rows; each
resolution is pruned after its retention."""

import datetime as dt
import math

import pytest

from telemetry.models import GpuRollup, GpuSample, NodeSample
from telemetry.rollups import HOUR_S, MINUTE_S, floor_to, prune, roll_up
from tests.telemetry.telemetry_helpers import plant, plant_network

NOW = dt.datetime(2025, 3, 1, 12, 30, 20, tzinfo=dt.UTC)


@pytest.fixture
def gpu(make_node):
    return make_node("node-1", gpus=2).gpus.get(index=0)


@pytest.fixture(autouse=True)
def _look_back_two_hours(settings):
    settings.TELEMETRY_ROLLUP_LOOKBACK_S = 2 * 3600


def rollup_rows():
    return list(GpuRollup.objects.order_by("resolution_s", "gpu_id", "bucket_start").values())


def test_a_minutes_samples_become_one_row_of_exact_sums(gpu):
    minute = dt.datetime(2025, 3, 1, 12, 10, tzinfo=dt.UTC)
    plant(gpu, minute + dt.timedelta(seconds=5), [10, 40, 70], every_s=20, memory=lambda k: 1000 + 100 * k)
    plant(gpu, minute + dt.timedelta(seconds=65), [99], memory=5000, power_mw=300_000, temperature=70)

    written = roll_up(NOW)

    first = GpuRollup.objects.get(gpu=gpu, resolution_s=MINUTE_S, bucket_start=minute)
    assert (first.samples, first.util_sum, first.util_sq_sum, first.util_min, first.util_max) == (
        3,
        120,
        100 + 1600 + 4900,
        10,
        70,
    )
    assert (first.memory_sum, first.memory_sq_sum, first.memory_min, first.memory_max) == (
        3300,
        1000**2 + 1100**2 + 1200**2,
        1000,
        1200,
    )
    assert (first.power_sum, first.temperature_sum) == (600_000, 180)
    # mean and population std-dev follow from the sums
    mean = first.util_sum / first.samples
    assert mean == 40
    assert math.isclose(math.sqrt(first.util_sq_sum / first.samples - mean**2), math.sqrt(600))
    second = GpuRollup.objects.get(resolution_s=MINUTE_S, bucket_start=minute + dt.timedelta(minutes=1))
    assert (second.samples, second.util_sum, second.memory_max, second.power_sum) == (1, 99, 5000, 300_000)
    hour = GpuRollup.objects.get(gpu=gpu, resolution_s=HOUR_S)
    assert hour.bucket_start == dt.datetime(2025, 3, 1, 12, tzinfo=dt.UTC)
    assert (hour.samples, hour.util_sum, hour.util_sq_sum, hour.util_min, hour.util_max) == (
        4,
        219,
        6600 + 99**2,
        10,
        99,
    )
    assert (hour.memory_min, hour.memory_max, hour.temperature_sum) == (1000, 5000, 250)
    assert written == {"minute": 2, "hour": 1}


def test_each_card_and_hour_has_its_own_rows(make_node):
    node = make_node("node-2", gpus=2)
    a, b = node.gpus.order_by("index")
    plant(a, dt.datetime(2025, 3, 1, 11, 59, tzinfo=dt.UTC), [20, 40])  # 11:59 and 12:00
    plant(b, dt.datetime(2025, 3, 1, 12, 0, 30, tzinfo=dt.UTC), [80])

    roll_up(NOW)

    hours = {
        (r.gpu_id, r.bucket_start.hour): (r.samples, r.util_sum)
        for r in GpuRollup.objects.filter(resolution_s=HOUR_S)
    }
    assert hours == {(a.pk, 11): (1, 20), (a.pk, 12): (1, 40), (b.pk, 12): (1, 80)}


def test_a_rerun_writes_the_same_rows_and_a_late_sample_updates_its_minute(gpu):
    start = dt.datetime(2025, 3, 1, 11, 40, tzinfo=dt.UTC)
    plant(gpu, start, [k % 100 for k in range(45)], every_s=30)
    roll_up(NOW)
    before = rollup_rows()

    roll_up(NOW)
    roll_up(NOW)

    assert rollup_rows() == before
    assert GpuRollup.objects.filter(resolution_s=MINUTE_S).count() == 23
    plant(gpu, start + dt.timedelta(seconds=10), [100])  # arrives late, lands in 11:40
    roll_up(NOW)
    minute = GpuRollup.objects.get(resolution_s=MINUTE_S, bucket_start=start)
    assert (minute.samples, minute.util_sum, minute.util_max) == (3, 0 + 1 + 100, 100)
    assert GpuRollup.objects.filter(resolution_s=MINUTE_S).count() == 23


def test_minutes_older_than_the_lookback_are_left_alone(gpu, settings):
    settings.TELEMETRY_ROLLUP_LOOKBACK_S = 600
    plant(gpu, NOW - dt.timedelta(minutes=30), [50])
    plant(gpu, NOW - dt.timedelta(minutes=5), [60])

    roll_up(NOW)

    assert list(GpuRollup.objects.filter(resolution_s=MINUTE_S).values_list("util_sum", flat=True)) == [60]


def test_each_resolution_is_pruned_after_its_retention(gpu, settings):
    settings.TELEMETRY_RAW_RETENTION_S = 3 * 3600
    settings.TELEMETRY_MINUTE_RETENTION_S = 2 * 86400
    settings.TELEMETRY_HOUR_RETENTION_S = 30 * 86400
    plant(gpu, NOW - dt.timedelta(hours=3, seconds=1), [1, 2], every_s=2)  # 3h1s and 2h59m59s old
    plant_network(gpu.node, NOW - dt.timedelta(hours=3, seconds=1), [5, 6], every_s=2)
    for resolution, age in [
        (MINUTE_S, dt.timedelta(days=2, minutes=1)),
        (MINUTE_S, dt.timedelta(days=1, hours=23)),
        (HOUR_S, dt.timedelta(days=30, hours=1)),
        (HOUR_S, dt.timedelta(days=29)),
    ]:
        GpuRollup.objects.create(
            gpu=gpu,
            resolution_s=resolution,
            bucket_start=floor_to(NOW - age, resolution),
            samples=1,
            util_sum=1,
            util_sq_sum=1,
            util_min=1,
            util_max=1,
            memory_sum=1,
            memory_sq_sum=1,
            memory_min=1,
            memory_max=1,
            power_sum=1,
            temperature_sum=1,
        )

    deleted = prune(NOW)

    assert deleted == {"raw": 1, "node": 1, "minute": 1, "hour": 1}
    assert list(GpuSample.objects.values_list("gpu_util_percent", flat=True)) == [2]
    assert list(NodeSample.objects.values_list("network_bytes_per_s", flat=True)) == [6]
    kept = GpuRollup.objects.order_by("resolution_s").values_list("resolution_s", "bucket_start")
    assert list(kept) == [
        (MINUTE_S, floor_to(NOW - dt.timedelta(days=1, hours=23), MINUTE_S)),
        (HOUR_S, floor_to(NOW - dt.timedelta(days=29), HOUR_S)),
    ]


def test_rollups_work_with_the_query_log_on(gpu, settings):
    """DEBUG (the embedded default) logs each query by formatting it with its parameters."""
    settings.DEBUG = True
    plant(gpu, NOW - dt.timedelta(minutes=3), [10, 20])

    roll_up(NOW)

    assert sorted(GpuRollup.objects.filter(resolution_s=MINUTE_S).values_list("util_sum", flat=True)) == [
        10,
        20,
    ]
