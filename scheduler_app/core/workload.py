"""A seeded synthetic workload: what the queueing benchmark replays and the demo's week of history.

Request shapes (cards per request, milli-GPU per card) are drawn with the caller's frequencies (the
benchmark reads them from the Alibaba 2023 trace). Durations mix a few long jobs with many short
ones; users declare a max duration 0-50 % above the real one. Arrivals are Poisson at the rate that
offers `load` x the cluster's milli-GPU capacity, split unevenly across teams so that some borrow
beyond their quota and others reclaim it. Pure: the only randomness is the seeded generator's.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .cluster import RequestSpec

TEAMS = {"vision": 0.4, "language": 0.3, "speech": 0.2, "research": 0.1}


@dataclass(frozen=True, slots=True)
class Durations:
    """How long jobs really run (s): a `long_share` of them uniformly in `long_s`, the rest in `short_s`."""

    long_share: float = 0.1
    long_s: tuple[int, int] = (3600, 4 * 3600)
    short_s: tuple[int, int] = (120, 1800)


BENCHMARK_DURATIONS = Durations()


@dataclass(frozen=True, slots=True)
class Job:
    """A request and how long it really runs (s), which the scheduler never sees."""

    request: RequestSpec
    duration_s: int


def generate(
    seed: int,
    jobs: int,
    capacity_milli: int,
    load: float,
    shapes: dict[tuple[int, int], int],
    teams: dict[str, float] | None = None,
    durations: Durations = BENCHMARK_DURATIONS,
) -> list[Job]:
    """`jobs` jobs arriving as a Poisson stream that offers `load` x capacity, from time 0.

    shapes: (num_gpus, milli per card) -> weight; teams: slug -> share of the jobs (default TEAMS).
    """
    rng = random.Random(seed)
    kinds, weights = list(shapes), list(shapes.values())
    teams = teams or TEAMS
    names, team_weights = list(teams), list(teams.values())
    drawn = []
    for _ in range(jobs):
        gpus, milli = rng.choices(kinds, weights)[0]
        low, high = durations.long_s if rng.random() < durations.long_share else durations.short_s
        drawn.append((gpus, milli, rng.randint(low, high), rng.choices(names, team_weights)[0]))
    work = sum(g * m * d for g, m, d, _ in drawn) / jobs  # mean milli-seconds per job
    rate = load * capacity_milli / work  # arrivals per second
    out, clock = [], 0.0
    for i, (gpus, milli, duration, team) in enumerate(drawn):
        clock += rng.expovariate(rate)
        declared = math.ceil(duration * rng.uniform(1.0, 1.5) / 60) * 60
        request = RequestSpec(i, milli, gpus, team=team, max_duration_s=declared, submitted_at=round(clock))
        out.append(Job(request, duration))
    return out
