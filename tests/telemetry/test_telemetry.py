"""record_gpu_samples: a node's batch of card readings is checked whole, stored once, and is its heartbeat;
the pure downsampling and summary behind the utilization endpoint."""

import datetime as dt

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse

from audit.models import Event
from scheduler_app.choices import NodeStatus
from scheduler_app.models import Node
from scheduler_app.services.inventory import set_node_status
from telemetry.models import GpuSample
from telemetry.services import current_load, downsample, record_gpu_samples, summarize

NOW = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def reading(uuid, util=40, memory=2048, power_mw=250_000, temperature=61, **changes):
    return {
        "uuid": uuid,
        "gpu_util_percent": util,
        "memory_used_mib": memory,
        "power_mw": power_mw,
        "temperature_c": temperature,
    } | changes


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2, memory_mib=81920)


@pytest.fixture
def other_node(make_node):
    return make_node("node-2", gpus=1)


def test_a_valid_batch_is_stored_with_its_units(node):
    at = NOW - dt.timedelta(seconds=5)

    accepted = record_gpu_samples(
        node,
        at,
        [reading("GPU-node-1-0", util=87, power_mw=312_500), reading("GPU-node-1-1", util=0)],
        now=NOW,
    )

    assert accepted == 2
    rows = list(
        GpuSample.objects.order_by("gpu__index").values_list(
            "gpu__index", "sampled_at", "gpu_util_percent", "memory_used_mib", "power_mw", "temperature_c"
        )
    )
    assert rows == [(0, at, 87, 2048, 312_500, 61), (1, at, 0, 2048, 250_000, 61)]
    assert set(GpuSample.objects.values_list("received_at", flat=True)) == {NOW}


def test_a_batch_is_the_nodes_heartbeat(node):
    assert node.last_heartbeat_at is None

    record_gpu_samples(node, NOW, [reading("GPU-node-1-0")], now=NOW)

    node.refresh_from_db()
    assert node.last_heartbeat_at == NOW
    assert node.status == NodeStatus.READY


def test_a_suspect_node_is_ready_again_and_the_event_says_why(node):
    set_node_status(node, NodeStatus.SUSPECT, actor_name="heartbeat watchdog", reason="silent")

    record_gpu_samples(node, NOW, [reading("GPU-node-1-0")], now=NOW)

    node.refresh_from_db()
    assert node.status == NodeStatus.READY
    last = Event.objects.filter(
        content_type=ContentType.objects.get_for_model(Node), object_id=node.pk
    ).last()
    assert (last.from_state, last.to_state, last.actor_label, last.reason) == (
        "suspect",
        "ready",
        "node agent",
        "heartbeat resumed",
    )


def test_a_lost_node_stays_lost_until_an_operator_acts(node):
    set_node_status(node, NodeStatus.LOST, reason="test")

    record_gpu_samples(node, NOW, [reading("GPU-node-1-0")], now=NOW)

    node.refresh_from_db()
    assert (node.status, node.last_heartbeat_at) == (NodeStatus.LOST, NOW)


@pytest.mark.parametrize(
    ("sampled_at", "readings", "field", "message"),
    [
        (NOW, [reading("GPU-node-1-0"), reading("GPU-nope")], "gpus[1].uuid", "not a card of node node-1"),
        (NOW, [reading("GPU-node-2-0")], "gpus[0].uuid", "not a card of node node-1"),
        (NOW, [reading("GPU-node-1-0"), reading("GPU-node-1-0")], "gpus[1].uuid", "appears twice"),
        (NOW, [reading("GPU-node-1-0", util=101)], "gpus[0].gpu_util_percent", "give 0 to 100"),
        (NOW, [reading("GPU-node-1-0", util=-1)], "gpus[0].gpu_util_percent", "out of range"),
        (NOW, [reading("GPU-node-1-0", util=True)], "gpus[0].gpu_util_percent", "whole number"),
        (NOW, [reading("GPU-node-1-0", util=50.5)], "gpus[0].gpu_util_percent", "whole number"),
        (NOW, [reading("GPU-node-1-1", memory=81921)], "gpus[0].memory_used_mib", "give 0 to 81920"),
        (NOW, [reading("GPU-node-1-0", memory="5")], "gpus[0].memory_used_mib", "whole number"),
        (NOW, [reading("GPU-node-1-0", power_mw=5_000_001)], "gpus[0].power_mw", "out of range"),
        (NOW, [reading("GPU-node-1-0", power_mw=-3)], "gpus[0].power_mw", "out of range"),
        (NOW, [reading("GPU-node-1-0", temperature=151)], "gpus[0].temperature_c", "out of range"),
        (NOW, [{"uuid": "GPU-node-1-0", "gpu_util_percent": 3}], "gpus[0].power_mw", "required"),
        (NOW, [["GPU-node-1-0", 3]], "gpus[0].uuid", "as an object"),
        (NOW + dt.timedelta(seconds=61), [reading("GPU-node-1-0")], "sampled_at", "in the future"),
        (NOW - dt.timedelta(seconds=3601), [reading("GPU-node-1-0")], "sampled_at", "older than 60 minutes"),
        (NOW.replace(tzinfo=None), [reading("GPU-node-1-0")], "sampled_at", "timezone"),
        (NOW, [reading(f"GPU-node-1-{i}") for i in range(65)], "gpus", "At most 64"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(node, other_node, sampled_at, readings, field, message):
    set_node_status(node, NodeStatus.SUSPECT, reason="silent")
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as raised:
        record_gpu_samples(node, sampled_at, readings, now=NOW)

    assert message in " ".join(raised.value.message_dict[field])
    assert GpuSample.objects.count() == 0
    node.refresh_from_db()
    assert (node.last_heartbeat_at, node.status) == (None, NodeStatus.SUSPECT)
    assert Event.objects.count() == events_before


def test_one_bad_reading_keeps_the_good_ones_out_too(node):
    with pytest.raises(ValidationError) as raised:
        record_gpu_samples(node, NOW, [reading("GPU-node-1-0"), reading("GPU-node-1-1", util=300)], now=NOW)

    assert list(raised.value.message_dict) == ["gpus[1].gpu_util_percent"]
    assert not GpuSample.objects.exists()


def test_a_small_clock_skew_is_accepted(node):
    record_gpu_samples(node, NOW + dt.timedelta(seconds=59), [reading("GPU-node-1-0")], now=NOW)

    assert GpuSample.objects.count() == 1


def test_replaying_a_batch_stores_it_once(node):
    batch = [reading("GPU-node-1-0", util=10), reading("GPU-node-1-1", util=20)]
    record_gpu_samples(node, NOW, batch, now=NOW)

    again = record_gpu_samples(node, NOW, batch, now=NOW + dt.timedelta(seconds=3))
    record_gpu_samples(node, NOW + dt.timedelta(seconds=5), batch, now=NOW + dt.timedelta(seconds=6))

    assert again == 2
    assert GpuSample.objects.filter(sampled_at=NOW).count() == 2
    assert GpuSample.objects.count() == 4
    node.refresh_from_db()
    assert node.last_heartbeat_at == NOW + dt.timedelta(seconds=6)


def test_the_database_refuses_out_of_range_samples(node):
    gpu = node.gpus.get(index=0)
    good = {"gpu": gpu, "memory_used_mib": 1, "power_mw": 1, "temperature_c": 40, "gpu_util_percent": 5}
    for change in ({"gpu_util_percent": 101}, {"power_mw": 5_000_001}, {"temperature_c": 151}):
        with pytest.raises(IntegrityError), transaction.atomic():
            GpuSample.objects.create(sampled_at=NOW, **(good | change))
    GpuSample.objects.create(sampled_at=NOW, **good)
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuSample.objects.create(sampled_at=NOW, **good)


def samples_at(*pairs):
    """Unsaved samples at NOW + seconds with the given util."""
    return [
        GpuSample(
            sampled_at=NOW + dt.timedelta(seconds=s),
            gpu_util_percent=u,
            memory_used_mib=1000 + u,
            power_mw=100_000,
            temperature_c=50,
        )
        for s, u in pairs
    ]


def test_downsample_means_each_bucket_and_caps_the_points():
    samples = samples_at(*[(s, s % 100) for s in range(0, 900, 5)])  # 180 samples, one every 5 s

    points = downsample(samples, start=NOW, window_s=900, max_points=60)

    assert len(points) == 60
    assert points[0].at == NOW and points[1].at == NOW + dt.timedelta(seconds=15)
    assert (points[0].samples, points[0].gpu_util_percent, points[0].memory_used_mib) == (3, 5.0, 1005)
    assert sum(p.samples for p in points) == 180


def test_downsample_skips_empty_buckets_and_keeps_late_samples_in_the_last():
    points = downsample(samples_at((0, 10), (899, 30), (905, 50)), start=NOW, window_s=900, max_points=60)

    assert [(p.at, p.samples, p.gpu_util_percent) for p in points] == [
        (NOW, 1, 10.0),
        (NOW + dt.timedelta(seconds=885), 2, 40.0),
    ]


def test_summary_gives_util_mean_and_stddev_against_the_15_percent_target():
    steady = summarize(samples_at((0, 60), (5, 70), (10, 80)))
    bursty = summarize(samples_at((0, 0), (5, 100)))

    assert (steady.samples, steady.mean_util_percent, steady.util_stddev_percent) == (3, 70.0, 8.2)
    assert steady.util_steady is True
    assert (bursty.mean_util_percent, bursty.util_stddev_percent, bursty.util_steady) == (50.0, 50.0, False)
    assert summarize([]).util_steady is None


def test_current_load_means_each_cards_last_minute_then_the_cards():
    # Card A read three times in the last minute (util 60, 70, 80; memory 1060..1080 of 2000 MiB),
    # card B once (util 10, memory 1010 of 4000 MiB); a reading two minutes old does not count.
    card_a = samples_at((-120, 0), (-50, 60), (-20, 70), (0, 80))
    card_b = samples_at((-10, 10))

    load = current_load([(card_a, 2000), (card_b, 4000), ([], 8000)], now=NOW)

    assert (load.window_s, load.cards_read) == (60, 2)
    assert load.gpu_util_percent == 40.0  # (70 + 10) / 2: each card weighs once
    assert load.mem_util_percent == round((100 * 1070 / 2000 + 100 * 1010 / 4000) / 2, 1)


def test_current_load_without_recent_readings_is_none():
    load = current_load([(samples_at((-61, 50)), 2000)], now=NOW)

    assert (load.cards_read, load.gpu_util_percent, load.mem_util_percent) == (0, None, None)


def test_admin_lists_samples_read_only(client, operator, node):
    record_gpu_samples(node, NOW, [reading("GPU-node-1-0", util=77)], now=NOW)
    client.force_login(operator)
    sample = GpuSample.objects.get()

    listing = client.get(
        reverse("admin:telemetry_gpusample_changelist"),
        {"q": "GPU-node-1-0", "gpu__node__pool": node.pool_id},
    )
    detail = client.get(reverse("admin:telemetry_gpusample_change", args=[sample.pk]))
    add = client.get(reverse("admin:telemetry_gpusample_add"))

    assert listing.status_code == 200 and "node-1/gpu0" in listing.text
    assert detail.status_code == 200 and 'name="gpu_util_percent"' not in detail.text
    assert add.status_code == 403
