"""Planting telemetry for the rollup, derived-metric and Prometheus tests: rows written straight to the
tables (times under the test's control, outside the ingest's one-hour acceptance window)."""

import datetime as dt

from scheduler_app.models import Gpu
from telemetry.models import GpuSample, NodeSample


def plant(gpu: Gpu, start: dt.datetime, utils, *, every_s=60, memory=1000, power_mw=200_000, temperature=60):
    """A sample every `every_s` s from `start`, util from `utils`; memory may be a callable of the index."""
    GpuSample.objects.bulk_create(
        GpuSample(
            gpu=gpu,
            sampled_at=start + dt.timedelta(seconds=every_s * k),
            gpu_util_percent=util,
            memory_used_mib=memory(k) if callable(memory) else memory,
            power_mw=power_mw,
            temperature_c=temperature,
            received_at=start + dt.timedelta(seconds=every_s * k),
        )
        for k, util in enumerate(utils)
    )


def plant_network(node, start: dt.datetime, rates, *, every_s=10):
    NodeSample.objects.bulk_create(
        NodeSample(node=node, sampled_at=start + dt.timedelta(seconds=every_s * k), network_bytes_per_s=rate)
        for k, rate in enumerate(rates)
    )
