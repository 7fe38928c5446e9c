"""Each card's latest reading for Prometheus (text exposition format 0.0.4), under the names and labels
of NVIDIA's dcgm-exporter, so Grafana boards made for it work unchanged.

One series per card and open allocation on it (labels `team`, the team's slug, and `allocation`, the
request's id), as dcgm-exporter emits one per pod on a shared GPU; a card nobody holds has one series
with both empty. The values are the whole card's, repeated on each of its series: aggregate per card
with `max by (UUID)` rather than `sum`. A card silent for PROMETHEUS_STALE_S has no series (its last
value would mislead), as dcgm-exporter shows nothing for a card it cannot read.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from scheduler_app.models import Allocation, Gpu
from telemetry.models import GpuSample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROMETHEUS_STALE_S = 300

# (name, help, value from the card's memory in MiB and its sample), in dcgm-exporter's units.
METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda memory, s: s.gpu_util_percent),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda memory, s: s.memory_used_mib),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda memory, s: max(0, memory - s.memory_used_mib),
    ),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda memory, s: s.power_mw / 1000),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda memory, s: s.temperature_c),
)


@dataclass(frozen=True)
class CardReading:
    gpu: Gpu
    sample: GpuSample
    tenants: tuple[tuple[str, str], ...]  # (team slug, request id) per open allocation, or one ("", "")


def latest_readings(now: dt.datetime | None = None) -> list[CardReading]:
    """Every card with a sample in the last PROMETHEUS_STALE_S, its latest sample and its tenants.

    Three queries whatever the cluster's size."""
    now = now or timezone.now()
    fresh = GpuSample.objects.filter(
        gpu=OuterRef("pk"), sampled_at__gte=now - dt.timedelta(seconds=PROMETHEUS_STALE_S)
    )
    cards = list(
        Gpu.objects.select_related("node")
        .annotate(latest_id=Subquery(fresh.order_by("-sampled_at").values("pk")[:1]))
        .filter(latest_id__isnull=False)
        .order_by("node__name", "index")
    )
    samples = GpuSample.objects.in_bulk([card.latest_id for card in cards])
    tenants = defaultdict(list)
    for gpu_id, slug, request_id in (
        Allocation.objects.committed()
        .filter(gpu_id__in=[card.pk for card in cards])
        .order_by("request_id")
        .values_list("gpu_id", "request__team__slug", "request_id")
    ):
        tenants[gpu_id].append((slug, str(request_id)))
    return [
        CardReading(card, samples[card.latest_id], tuple(tenants[card.pk]) or (("", ""),)) for card in cards
    ]


def exposition(readings: Iterable[CardReading]) -> str:
    """The text format: for each metric its HELP and TYPE lines, then one line per series."""
    readings = list(readings)
    lines = []
    for name, help_text, value in METRICS:
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        for reading in readings:
            number = _number(value(reading.gpu.memory_mib, reading.sample))
            for team, allocation in reading.tenants:
                labels = {
                    "gpu": str(reading.gpu.index),
                    "UUID": reading.gpu.uuid,
                    "device": f"nvidia{reading.gpu.index}",
                    "modelName": reading.gpu.model,
                    "Hostname": reading.gpu.node.name,
                    "team": team,
                    "allocation": allocation,
                }
                body = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels.items())
                lines.append(f"{name}{{{body}}} {number}")
    return "\n".join(lines) + "\n"


def _number(value) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")
