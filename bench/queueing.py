"""Queueing benchmark: the portal's scheduler against the schedulers users would run instead.

    python -m bench.queueing [--seed 1 2 3] [--load 0.7 0.9 1.1] [--jobs 4000] [--nodes 16]
    python -m bench.queueing --consolidation 4 [--seed 1 2 3] [--load 0.9] [--mix gangs-10 ...]

Four schedulers (`SCHEDULERS`) run the same jobs through `scheduler_app.core.queueing.plan_pass`:
whole-GPU strict FIFO (requests rounded up to whole cards, no backfill); whole-GPU EASY backfill
(Slurm's default: only the head of the queue holds a reservation); fractional FIFO+backfill (slices
as asked, no quotas); fractional + fair, the default `QueueMode` (guaranteed quotas with borrowing and
reclaim, dominant-share fairness, priority with aging, conservative backfill behind 4 reservations,
the reclaim grace). The simulator (scheduler_app.core.simulator, also behind the what-if and the
demo's history) calls `plan_pass` at every event time, exactly as the database scheduler does, and
applies its plan: starts, and preemptions that checkpoint (work since the last checkpoint, every 10
min, is lost) and requeue. The workload (scheduler_app.core.workload, seeded) draws shapes with the
frequencies of the 7,064 GPU requests of the Alibaba 2023 trace (~55 % whole cards, ~44 % slices,
~1 % gangs), 10 % jobs of 1-4 h and 90 % of 2-30 min declaring max durations up to 50 % above,
Poisson arrivals offering `--load` of the milli-GPU capacity. Utilization is milli-GPU-seconds asked
over capacity from 4 h after the first arrival to the last.

``--consolidation K`` runs our scheduler with consolidation off and on (K moves per pass, every job
checkpointing each 10 min, moved at most once an hour, 60 s of work redone per move) on the `MIXES`:
the trace's shapes with 2-, 4- and 8-card gangs making up 10, 25 or 40 % of the GPU asked, and a
whole-card-heavy mix; one table of p95 delays of gangs and of whole cards, utilization, moves per job
and the share of GPU-hours lost to moves.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, replace

from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState
from scheduler_app.core.queueing import (
    DEFAULT_POLICY,
    EASY_BACKFILL,
    STRICT_FIFO,
    QueueMode,
    TeamQuota,
)
from scheduler_app.core.simulator import Outcome, p95, simulate
from scheduler_app.core.workload import BENCHMARK_DURATIONS, TEAMS, Job, generate

from .workload import trace_shapes

POOL = "bench"
GPUS_PER_NODE = 8
GPU_MEMORY_MIB = 81920
# Utilization is measured from this long after the first arrival: by then every job that runs began in the
# window, so the cluster is in steady state (from empty, the first hours miss the work of the long jobs
# that would already be running, about load x E[S^2] / 2E[S] = 0.6 cluster-hours at 90 %).
WARMUP_S = BENCHMARK_DURATIONS.long_s[1]


@dataclass(frozen=True, slots=True)
class Scheduler:
    """One way to run the jobs: a queue mode, whole cards or slices as asked, and whether teams get quotas."""

    name: str
    mode: QueueMode
    whole: bool
    quotas: bool


SCHEDULERS = (
    Scheduler("whole-GPU strict FIFO", STRICT_FIFO, whole=True, quotas=False),
    Scheduler("whole-GPU EASY backfill", EASY_BACKFILL, whole=True, quotas=False),
    Scheduler("fractional FIFO+backfill", EASY_BACKFILL, whole=False, quotas=False),
    Scheduler("fractional + fair (ours)", QueueMode(), whole=False, quotas=True),
)


def with_gangs(shapes: dict[tuple[int, int], int], share: float) -> dict[tuple[int, int], float]:
    """The trace's single-card shapes, with 2-, 4- and 8-card gangs (a third of the gangs' GPU each)
    making up `share` of the GPU asked."""
    singles = {shape: w for shape, w in shapes.items() if shape[0] == 1}
    single_milli = sum(w * milli for (_, milli), w in singles.items())
    gang_milli = single_milli * share / (1 - share)
    gangs = {(cards, MILLI_PER_GPU): gang_milli / 3 / (cards * MILLI_PER_GPU) for cards in (2, 4, 8)}
    return singles | gangs


def whole_card_heavy(shapes: dict[tuple[int, int], int], share: float = 0.8) -> dict[tuple[int, int], float]:
    """The trace's shapes with whole single cards making up `share` of the GPU asked (the trace: ~55 %)."""
    rest = {shape: w for shape, w in shapes.items() if shape != (1, MILLI_PER_GPU)}
    rest_milli = sum(w * cards * milli for (cards, milli), w in rest.items())
    return rest | {(1, MILLI_PER_GPU): rest_milli * share / (1 - share) / MILLI_PER_GPU}


MIXES = {
    "gangs-10": lambda shapes: with_gangs(shapes, 0.10),
    "gangs-25": lambda shapes: with_gangs(shapes, 0.25),
    "gangs-40": lambda shapes: with_gangs(shapes, 0.40),
    "whole-80": whole_card_heavy,
}


def make_nodes(count: int) -> list[NodeState]:
    """`count` identical 8-card nodes in one pool; host CPU and memory are not the bottleneck here."""
    return [
        NodeState(
            f"node-{i:03d}",
            POOL,
            10**9,
            10**9,
            [GpuState(g, "A100-80G", GPU_MEMORY_MIB) for g in range(GPUS_PER_NODE)],
        )
        for i in range(count)
    ]


def team_quotas(nodes: int) -> list[TeamQuota]:
    """Each team is guaranteed an equal share of the pool; demand is uneven (see workload)."""
    share = nodes * GPUS_PER_NODE * MILLI_PER_GPU // len(TEAMS)
    return [TeamQuota(team, POOL, share) for team in TEAMS]


def outcome_mean(outcome: Outcome) -> float:
    return statistics.fmean(outcome.delays)


def run(
    jobs: list[Job], nodes: int, scheduler: Scheduler, policy: str = DEFAULT_POLICY, consolidate: int = 0
) -> Outcome:
    """Simulate the jobs under one of the SCHEDULERS."""
    quotas = team_quotas(nodes) if scheduler.quotas else []
    return simulate(
        jobs,
        make_nodes(nodes),
        scheduler.mode,
        policy,
        quotas,
        scheduler.whole,
        warmup_s=WARMUP_S,
        consolidate=consolidate,
    )


def consolidation_figures(jobs: list[Job], outcome: Outcome) -> dict[str, float]:
    """p95 delay of gangs and of whole single cards (s), utilization, moves per job, and the share of the
    GPU work done that moves lost."""
    delay = outcome.delay_by_request
    gangs = [delay[j.request.id] for j in jobs if j.request.num_gpus > 1]
    whole = [delay[j.request.id] for j in jobs if j.request.num_gpus == 1 and j.request.gpu_milli == 1000]
    work = sum(j.duration_s * j.request.total_milli() for j in jobs)
    return {
        "gang p95": p95(gangs),
        "whole p95": p95(whole),
        "utilization": outcome.steady_utilization(),
        "moves/job": outcome.moves / len(jobs),
        "lost %": 100 * outcome.lost_to_moves / work,
    }


def consolidation_table(args, capacity: int) -> None:
    """Our scheduler with consolidation off and on, per mix and load, means over the seeds."""
    ours = SCHEDULERS[3]
    print("| mix | load | consolidation | gang p95 | whole-card p95 | utilization | moves/job | GPU-h lost |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for mix in args.mix:
        shapes = MIXES[mix](trace_shapes())
        for load in args.load:
            figures: dict[int, list[dict]] = {0: [], args.consolidation: []}
            for seed in args.seed:
                jobs = generate(seed, args.jobs, capacity, load, shapes)
                for moves in figures:
                    outcome = run(jobs, args.nodes, ours, args.policy, consolidate=moves)
                    figures[moves].append(consolidation_figures(jobs, outcome))
                    said = ", ".join(f"{k} {v:,.3f}" for k, v in figures[moves][-1].items())
                    print(f"  {mix} load {load:.0%} seed {seed} moves {moves}: {said}", flush=True)
            for moves, rows in figures.items():
                mean = {key: statistics.fmean(row[key] for row in rows) for key in rows[0]}
                print(
                    f"| {mix} | {load:.0%} | {'off' if not moves else f'{moves} moves/pass'} "
                    f"| {mean['gang p95']:,.0f} s | {mean['whole p95']:,.0f} s | {mean['utilization']:.1%} "
                    f"| {mean['moves/job']:.3f} | {mean['lost %']:.2f} % |",
                    flush=True,
                )
            off, on = (statistics.fmean(row["gang p95"] for row in figures[k]) for k in figures)
            print(f"{mix} at {load:.0%}: p95 gang delay off / on {off / max(on, 1e-9):.2f}x (target >= 2x)")


COLUMNS = (
    ("mean delay s", lambda o: f"{outcome_mean(o):,.0f}"),
    ("p95 delay s", lambda o: f"{p95(o.delays):,.0f}"),
    ("utilization", lambda o: f"{o.steady_utilization():.1%}"),
    ("(whole window)", lambda o: f"{o.utilization():.1%}"),
    ("preemptions", lambda o: f"{o.preemptions} ({o.preempted_share():.1%})"),
    ("lost GPU-h", lambda o: f"{o.lost_work / 3.6e6:.1f}"),
    ("makespan h", lambda o: f"{o.makespan_s / 3600:.1f}"),
)


def report(name: str, outcome: Outcome) -> None:
    cells = "  ".join(f"{title} {cell(outcome):>9}" for title, cell in COLUMNS)
    print(f"  {name:<26} {cells}  [{outcome.wall_s:.0f} s wall]", flush=True)


def summary(results: dict[tuple[float, str], list[Outcome]]) -> None:
    """Markdown rows per load and scheduler, means over the seeds: the columns, then mean delay per team."""
    print(
        "\n| load | scheduler | mean delay | p95 delay | utilization | preemptions | lost GPU-h | makespan |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (load, name), outcomes in results.items():

        def avg(metric, outcomes=outcomes) -> float:
            return statistics.fmean(metric(o) for o in outcomes)

        print(
            f"| {load:.0%} (realized {avg(Outcome.steady_offered):.1%}) | {name} "
            f"| {avg(outcome_mean):,.0f} s | {avg(lambda o: p95(o.delays)):,.0f} s "
            f"| {avg(Outcome.steady_utilization):.1%} "
            f"| {avg(lambda o: o.preemptions):.0f} ({avg(Outcome.preempted_share):.1%}) "
            f"| {avg(lambda o: o.lost_work) / 3.6e6:.1f} | {avg(lambda o: o.makespan_s) / 3600:.1f} h |"
        )
    teams = " | ".join(f"{team} ({share:.0%} of jobs)" for team, share in TEAMS.items())
    print(f"\n| load | scheduler | {teams} |")
    print(f"|---|---|{'---:|' * len(TEAMS)}")
    for (load, name), outcomes in results.items():
        cells = " | ".join(
            f"{statistics.fmean(statistics.fmean(o.team_delays[team]) for o in outcomes):,.0f} s"
            for team in TEAMS
        )
        print(f"| {load:.0%} | {name} | {cells} |")
    for load in dict.fromkeys(load for load, _ in results):
        ours, easy = results[load, SCHEDULERS[3].name], results[load, SCHEDULERS[1].name]
        ratios = [outcome_mean(e) / max(outcome_mean(o), 1e-9) for e, o in zip(easy, ours, strict=True)]
        overall = statistics.fmean(map(outcome_mean, easy)) / max(
            statistics.fmean(map(outcome_mean, ours)), 1e-9
        )
        print(
            f"load {load:.0%}: mean delay whole-GPU EASY / ours {overall:.1f}x over the seeds "
            f"(per seed {', '.join(f'{r:.1f}' for r in ratios)}; target >= 5x at 90 %)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, nargs="+", default=[1])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--nodes", type=int, default=16, help="8-card nodes")
    parser.add_argument(
        "--load", type=float, nargs="+", default=[0.9], help="offered milli-GPU load / capacity"
    )
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument(
        "--reclaim-grace",
        type=lambda text: None if text == "none" else float(text),
        default=QueueMode().reclaim_grace_s,
        help="our QueueMode.reclaim_grace_s (s, or none)",
    )
    parser.add_argument(
        "--only", nargs="+", type=int, choices=range(len(SCHEDULERS)), help="indices into SCHEDULERS"
    )
    parser.add_argument(
        "--consolidation",
        type=int,
        metavar="K",
        help="compare ours with consolidation off and at K moves/pass",
    )
    parser.add_argument("--mix", nargs="+", choices=list(MIXES), default=list(MIXES))
    args = parser.parse_args(argv)

    capacity = args.nodes * GPUS_PER_NODE * MILLI_PER_GPU
    if args.consolidation:
        consolidation_table(args, capacity)
        return
    schedulers = [SCHEDULERS[i] for i in args.only] if args.only else list(SCHEDULERS)
    ours = schedulers[-1] if schedulers[-1].quotas else None
    if ours is not None:
        schedulers[-1] = replace(ours, mode=replace(ours.mode, reclaim_grace_s=args.reclaim_grace))
    results: dict[tuple[float, str], list[Outcome]] = {}
    for load in args.load:
        for seed in args.seed:
            jobs = generate(seed, args.jobs, capacity, load, trace_shapes())
            span = (jobs[-1].request.submitted_at - jobs[0].request.submitted_at) / 3600
            print(
                f"{args.jobs} jobs over {span:.1f} h on {args.nodes} x {GPUS_PER_NODE} GPUs, offered load "
                f"{load:.0%}, seed {seed}, policy {args.policy}, our reclaim grace {args.reclaim_grace} s",
                flush=True,
            )
            for scheduler in schedulers:
                outcome = run(jobs, args.nodes, scheduler, args.policy)
                report(scheduler.name, outcome)
                results.setdefault((load, scheduler.name), []).append(outcome)
    if not args.only:
        summary(results)


if __name__ == "__main__":
    main()
