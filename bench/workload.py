"""The queueing benchmark's request shapes, read from the Alibaba 2023 trace; the generator itself is the
pure core's (scheduler_app.core.workload), which the demo's history uses too."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces"
    / "alibaba-gpu-v2023"
    / "csv"
    / "openb_pod_list_default.csv"
)


def trace_shapes(path: Path = TRACE) -> dict[tuple[int, int], int]:
    """(num_gpus, milli per card) -> count, over the trace's GPU requests."""
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        shapes = Counter((int(r["num_gpu"]), int(r["gpu_milli"])) for r in rows if int(r["num_gpu"]) > 0)
    return dict(shapes)
