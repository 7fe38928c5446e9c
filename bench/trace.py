"""Load the Alibaba GPU trace (cluster-trace-gpu-v2023, "openb") into the pure core's dataclasses.

Node CSV columns: sn, cpu_milli, memory_mib, gpu, model.
Pod CSV columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ...
`gpu_spec` ("V100M16|V100M32", empty for any) becomes RequestSpec.models.
"""

from __future__ import annotations

import csv
from pathlib import Path

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec

TRACE_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023" / "csv"
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACE_DIR / "openb_pod_list_default.csv"
BASELINES = TRACE_DIR.parent / "baseline_results" / "analysis_allo_discrete.csv"

# The trace gives no card memory; requests there ask for memory in proportion to
# their share, so these sizes (MiB) never decide a placement.
GPU_MEMORY_MIB = {"V100M16": 16384, "V100M32": 32768, "P100": 16384, "T4": 15360, "A10": 24576}
DEFAULT_GPU_MEMORY_MIB = 32768


def load_nodes(path: Path | str = DEFAULT_NODES, pool: str = "default") -> list[NodeState]:
    """One NodeState per CSV row, in file order."""
    nodes = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            model = row["model"] or ""
            memory = GPU_MEMORY_MIB.get(model, DEFAULT_GPU_MEMORY_MIB)
            gpus = [GpuState(i, model, memory) for i in range(int(row["gpu"]))]
            nodes.append(NodeState(row["sn"], pool, int(row["cpu_milli"]), int(row["memory_mib"]), gpus))
    return nodes


def load_pods(path: Path | str = DEFAULT_PODS) -> list[RequestSpec]:
    """One RequestSpec per CSV row, in file order; CPU-only pods have num_gpus == 0 and gpu_milli == 0."""
    pods = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            num_gpus = int(row["num_gpu"])
            spec = (row.get("gpu_spec") or "").strip()
            pods.append(
                RequestSpec(
                    id=row["name"],
                    gpu_milli=int(row["gpu_milli"]) if num_gpus else 0,
                    num_gpus=num_gpus,
                    cpu_milli=int(row["cpu_milli"]),
                    memory_mib=int(row["memory_mib"]),
                    models=frozenset(spec.split("|")) if spec else frozenset(),
                )
            )
    return pods
