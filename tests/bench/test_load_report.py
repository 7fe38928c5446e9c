"""bench.load's report: the invariant counts find planted defects, and the targets say what failed."""

import datetime as dt

import pytest
from django.utils import timezone

from bench.load_report import (
    failed_targets,
    gpus_over_capacity,
    latency_ms,
    open_slices_of_inactive_requests,
    pending_without_reason,
)
from scheduler_app.choices import BillingMode, RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.services import Slice, allocate, submit_request

SHARE = {"name": "train", "task_type": "training", "gpu_milli": 500}


def placed(member, team, gpu, milli=500):
    request = submit_request(user=member, team=team, pool_name="a100", **(SHARE | {"gpu_milli": milli}))
    allocate(request, [Slice(gpu.id, milli, 10_000)])
    return request


def test_a_healthy_cluster_counts_nothing(team, member, make_node):
    gpu = make_node().gpus.first()
    placed(member, team, gpu)

    assert open_slices_of_inactive_requests() == 0
    assert gpus_over_capacity() == 0


def test_an_open_slice_of_a_cancelled_request_is_counted(team, member, make_node):
    request = placed(member, team, make_node().gpus.first())
    GpuRequest.objects.filter(pk=request.pk).update(state=RequestState.CANCELLED)  # slice left open

    assert open_slices_of_inactive_requests() == 1


def test_a_card_over_its_milli_or_its_memory_is_counted(team, member, make_node):
    first, second, third = make_node().gpus.order_by("index")[:3]
    placed(member, team, first, milli=750)
    placed(member, team, second, milli=250)
    planted = {"milli": 500, "gpu_memory_mib": 10_000, "billing_mode": BillingMode.ON_DEMAND}
    Allocation.objects.create(request=placed(member, team, third), gpu=first, **planted)  # 1250 milli
    Allocation.objects.create(
        request=placed(member, team, third), gpu=second, **(planted | {"gpu_memory_mib": 80_000})
    )  # 750 milli, but 90,000 MiB on an 81,920 MiB card

    assert gpus_over_capacity() == 2


def test_pending_without_a_reason_counts_only_after_two_passes(team, member, pool):
    now = timezone.now()
    old = submit_request(user=member, team=team, pool_name="a100", **SHARE)
    GpuRequest.objects.filter(pk=old.pk).update(created_at=now - dt.timedelta(seconds=21))
    explained = submit_request(user=member, team=team, pool_name="a100", **SHARE)
    GpuRequest.objects.filter(pk=explained.pk).update(
        created_at=now - dt.timedelta(seconds=60), pending_reason="no GPU with 500 milli free"
    )
    submit_request(user=member, team=team, pool_name="a100", **SHARE)  # just submitted

    assert pending_without_reason(now, interval_s=10) == 1


def test_latency_percentiles_are_in_milliseconds():
    samples = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms

    assert latency_ms(samples) == {"p50": pytest.approx(50.5), "p95": pytest.approx(95.05)}
    assert latency_ms([]) == {"p50": None, "p95": None}


def test_a_count_target_fails_the_run_and_a_slow_run_is_only_reported():
    result = {
        "server_errors": 0,
        "transport_errors": 0,
        "open_slices_of_inactive_requests": 1,
        "gpus_over_capacity": 0,
        "pending_without_reason": 0,
        "submits_per_s": 90.0,
        "submit_latency_ms": {"p50": 80.0, "p95": 240.0},
    }

    counts, speed = failed_targets(result)

    assert counts == ["open_slices_of_inactive_requests = 1 (target 0)"]
    assert speed == ["submits/s 90.0 (target >= 150)"]
