# ruff: noqa: F811 (the imported node and agent fixtures are parameters by design)
"""Ingest's additions: the node's network throughput (optional, validated) and several moments in one
request, through POST /api/v1/agent/samples/ and the service, on the same one-row-per-card-and-time rule."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduler_app.constants import MAX_MOMENTS_PER_SAMPLE_BATCH, MAX_NETWORK_BYTES_PER_S
from telemetry.models import GpuSample, NodeSample
from telemetry.services import SampleMoment, record_gpu_samples, record_sample_moments
from tests.telemetry.test_api_telemetry import agent, node  # noqa: F401 (fixtures)

INGEST = "/api/v1/agent/samples/"


def readings(*utils):
    return [
        {
            "uuid": f"GPU-node-1-{i}",
            "gpu_util_percent": util,
            "memory_used_mib": 4096,
            "power_mw": 275_000,
            "temperature_c": 64,
        }
        for i, util in enumerate(utils)
    ]


def moment(at, *utils, **extra):
    return {"sampled_at": at.isoformat(), "gpus": readings(*utils), **extra}


def test_a_batch_may_carry_the_nodes_network_throughput(agent, node):
    at = timezone.now().replace(microsecond=0)

    response = agent.post(INGEST, moment(at, 50, 60, network_bytes_per_s=750_000_000), format="json")

    assert response.status_code == 200, response.json()
    assert list(NodeSample.objects.values_list("node", "sampled_at", "network_bytes_per_s")) == [
        (node.pk, at, 750_000_000)
    ]


def test_a_batch_without_network_stores_no_node_reading(agent):
    response = agent.post(INGEST, moment(timezone.now(), 50), format="json")

    assert response.status_code == 200
    assert GpuSample.objects.count() == 1
    assert not NodeSample.objects.exists()


@pytest.mark.parametrize(
    "value, message",
    [
        (-1, "greater than or equal to 0"),
        (MAX_NETWORK_BYTES_PER_S + 1, f"less than or equal to {MAX_NETWORK_BYTES_PER_S}"),
        ("fast", "valid integer"),
        (1.5, "valid integer"),
        (True, "valid integer"),
    ],
)
def test_a_bad_network_reading_is_a_400_and_writes_nothing(agent, node, value, message):
    response = agent.post(INGEST, moment(timezone.now(), 50, network_bytes_per_s=value), format="json")

    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert message in fields["network_bytes_per_s"][0], fields
    assert not GpuSample.objects.exists() and not NodeSample.objects.exists()
    node.refresh_from_db()
    assert node.last_heartbeat_at is None


def test_several_moments_in_one_request_store_one_row_per_card_and_time(agent, node):
    now = timezone.now().replace(microsecond=0)
    body = {
        "moments": [
            moment(now - dt.timedelta(seconds=s), 10 + s, 20 + s, network_bytes_per_s=s) for s in range(3)
        ]
    }

    first = agent.post(INGEST, body, format="json")
    again = agent.post(INGEST, body, format="json")

    assert first.status_code == again.status_code == 200
    assert first.json()["accepted"] == 6
    assert GpuSample.objects.count() == 6
    assert sorted(GpuSample.objects.filter(gpu__index=1).values_list("gpu_util_percent", flat=True)) == [
        20,
        21,
        22,
    ]
    assert sorted(NodeSample.objects.values_list("network_bytes_per_s", flat=True)) == [0, 1, 2]


@pytest.mark.parametrize(
    "change, field",
    [
        (
            lambda b: b["moments"][1]["gpus"][0].update(gpu_util_percent=101),
            "moments[1].gpus[0].gpu_util_percent",
        ),
        (lambda b: b["moments"][1]["gpus"][0].update(uuid="GPU-elsewhere"), "moments[1].gpus[0].uuid"),
        (lambda b: b["moments"][0].update(network_bytes_per_s=-5), "moments[0].network_bytes_per_s"),
        (lambda b: b["moments"][1].update(sampled_at=b["moments"][0]["sampled_at"]), "moments"),
        (lambda b: b.update(moments=[]), "moments"),
        (lambda b: b.update(moments=b["moments"] * 31), "moments"),
    ],
)
def test_a_bad_moment_is_a_400_naming_its_place_and_nothing_is_written(agent, node, change, field):
    now = timezone.now()
    body = {"moments": [moment(now, 10, 20), moment(now - dt.timedelta(seconds=1), 30, 40)]}
    change(body)

    response = agent.post(INGEST, body, format="json")

    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"], response.json()
    assert not GpuSample.objects.exists() and not NodeSample.objects.exists()
    node.refresh_from_db()
    assert node.last_heartbeat_at is None


def test_the_service_checks_network_readings_and_moment_counts_too(node):
    now = timezone.now()
    with pytest.raises(ValidationError) as refused:
        record_gpu_samples(node, now, readings(10), now=now, network_bytes_per_s=-1)
    assert "network_bytes_per_s" in refused.value.message_dict
    too_many = [
        SampleMoment(now - dt.timedelta(seconds=s), readings(10))
        for s in range(MAX_MOMENTS_PER_SAMPLE_BATCH + 1)
    ]
    with pytest.raises(ValidationError) as refused:
        record_sample_moments(node, too_many, now=now)
    assert refused.value.message_dict["moments"] == [
        f"At most {MAX_MOMENTS_PER_SAMPLE_BATCH} moments in one batch."
    ]
    assert not GpuSample.objects.exists() and not NodeSample.objects.exists()


def test_a_card_changed_since_the_last_batch_is_judged_as_it_is_now(node):
    """The ingest may remember a node's cards between batches; what it remembers never decides alone."""
    now = timezone.now()
    record_gpu_samples(node, now - dt.timedelta(seconds=2), readings(10), now=now)
    card = node.gpus.get(index=0)
    card.memory_mib = 2048  # re-registered smaller: the next reading's 4096 MiB no longer fits
    card.save()

    with pytest.raises(ValidationError) as refused:
        record_gpu_samples(node, now - dt.timedelta(seconds=1), readings(20), now=now)

    assert refused.value.message_dict["gpus[0].memory_used_mib"] == ["4096 is out of range: give 0 to 2048."]
    assert GpuSample.objects.count() == 1
    card.uuid = "GPU-node-1-0-new"  # replaced: the old uuid is no card of the node any more
    card.memory_mib = 81920
    card.save()
    with pytest.raises(ValidationError) as refused:
        record_gpu_samples(node, now, readings(30), now=now)
    assert "'GPU-node-1-0' is not a card of node node-1." in refused.value.message_dict["gpus[0].uuid"]
    fresh = [dict(readings(40)[0], uuid="GPU-node-1-0-new")]
    assert record_gpu_samples(node, now, fresh, now=now) == 1
    assert sorted(GpuSample.objects.values_list("gpu_util_percent", flat=True)) == [10, 40]
