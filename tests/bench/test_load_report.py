"""bench.load's report: the invariant counts find planted defects, and the targets say what failed."""

import datetime as dt

import pytest
from django.utils import timezone

from bench.load_report import failed_targets, latency_ms, pending_without_reason
from scheduler_app.models import GpuRequest
from scheduler_app.services.requests import submit_request

SHARE = {"name": "train", "task_type": "training", "gpu_milli": 500}


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
