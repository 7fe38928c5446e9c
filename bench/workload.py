"""A seeded synthetic workload for the queueing benchmark.

Request shapes (cards per request, milli-GPU per card) are drawn with the
frequencies of the GPU requests in the Alibaba 2023 trace (openb_pod_list_default:
about half whole cards, the rest slices, a few 2-, 4- and 8-card gangs).
Durations mix a few long jobs (1-4 h) with many short ones (2-30 min); users
declare a max duration 0-50 % above the real one. Arrivals are Poisson at the rate
that offers `load` x the cluster's milli-GPU capacity, split unevenly across teams
so that some borrow beyond their quota and others reclaim it.
"""

from __future__ import annotations

import csv
import math
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scheduler_app.core.cluster import RequestSpec

TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces"
    / "alibaba-gpu-v2023"
    / "csv"
    / "openb_pod_list_default.csv"
)
TEAMS = {"vision": 0.4, "language": 0.3, "speech": 0.2, "research": 0.1}
LONG_SHARE = 0.1
LONG_S = (3600, 4 * 3600)
SHORT_S = (120, 1800)


@dataclass(frozen=True, slots=True)
class Job:
    """A request and how long it really runs (s), which the scheduler never sees."""

    request: RequestSpec
    duration_s: int


def trace_shapes(path: Path = TRACE) -> dict[tuple[int, int], int]:
    """(num_gpus, milli per card) -> count, over the trace's GPU requests."""
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        shapes = Counter((int(r["num_gpu"]), int(r["gpu_milli"])) for r in rows if int(r["num_gpu"]) > 0)
    return dict(shapes)


def generate(
    seed: int, jobs: int, capacity_milli: int, load: float, shapes: dict[tuple[int, int], int]
) -> list[Job]:
    """`jobs` jobs arriving as a Poisson stream that offers `load` x capacity."""
    rng = random.Random(seed)
    kinds, weights = list(shapes), list(shapes.values())
    teams, team_weights = list(TEAMS), list(TEAMS.values())
    drawn = []
    for _ in range(jobs):
        gpus, milli = rng.choices(kinds, weights)[0]
        low, high = LONG_S if rng.random() < LONG_SHARE else SHORT_S
        drawn.append((gpus, milli, rng.randint(low, high), rng.choices(teams, team_weights)[0]))
    work = sum(g * m * d for g, m, d, _ in drawn) / jobs  # mean milli-seconds per job
    rate = load * capacity_milli / work  # arrivals per second
    out, clock = [], 0.0
    for i, (gpus, milli, duration, team) in enumerate(drawn):
        clock += rng.expovariate(rate)
        declared = math.ceil(duration * rng.uniform(1.0, 1.5) / 60) * 60
        request = RequestSpec(i, milli, gpus, team=team, max_duration_s=declared, submitted_at=round(clock))
        out.append(Job(request, duration))
    return out
