"""The core simulator under the benchmark's baselines, on hand-made job lists checked by hand."""

from bench.queueing import POOL, SCHEDULERS, make_nodes
from scheduler_app.core.cluster import RequestSpec
from scheduler_app.core.queueing import EASY_BACKFILL, STRICT_FIFO, QueueMode, TeamQuota
from scheduler_app.core.simulator import simulate
from scheduler_app.core.workload import Job


def job(rid, cards, at, runs, declared, team="ml"):
    return Job(RequestSpec(rid, 1000, cards, team=team, max_duration_s=declared, submitted_at=at), runs)


# One 8-card node: A holds half of it until t=100, the 8-card gang H waits for it, S (2 cards, declared to
# end by t=62) fits before H's reservation, L (2 cards, declared to end by t=203) does not.
JOBS = [
    job("A", 4, 0, runs=100, declared=100),
    job("H", 8, 1, runs=100, declared=100),
    job("S", 2, 2, runs=50, declared=60),
    job("L", 2, 3, runs=50, declared=200),
]


def test_easy_backfill_starts_what_ends_before_the_heads_reservation_and_holds_the_rest():
    # when the node runs the jobs under EASY backfill
    outcome = simulate(JOBS, make_nodes(1), EASY_BACKFILL, "first-fit", [], whole=True)
    # then S starts at once; H starts at 100 when A ends (L did not delay it), L after H at 200
    assert outcome.delays == [0, 99, 0, 197]
    assert outcome.makespan_s == 250
    assert outcome.preemptions == 0


def test_strict_fifo_holds_the_backfill_candidate_behind_the_head():
    # when the same jobs run in strict FIFO
    outcome = simulate(JOBS, make_nodes(1), STRICT_FIFO, "first-fit", [], whole=True)
    # then S waits for H to finish too
    assert outcome.delays == [0, 99, 198, 197]


def test_every_baseline_runs_the_same_jobs_and_keeps_the_portal_scheduler_last():
    # the summary compares the last scheduler (the portal's, with quotas) with whole-GPU EASY backfill
    assert [s.name for s in SCHEDULERS] == [
        "whole-GPU strict FIFO",
        "whole-GPU EASY backfill",
        "fractional FIFO+backfill",
        "fractional + fair (ours)",
    ]
    assert [(s.mode, s.whole, s.quotas) for s in SCHEDULERS[:3]] == [
        (STRICT_FIFO, True, False),
        (EASY_BACKFILL, True, False),
        (EASY_BACKFILL, False, False),
    ]
    assert SCHEDULERS[3].quotas and SCHEDULERS[3].mode.fair_share


def test_a_reclaimed_job_loses_the_work_since_its_checkpoint_and_runs_the_rest_later():
    # given "data" borrows the whole node (runs 2,000 s, declared 3,000 s); the quota owner "ml" asks at 700
    quotas = [TeamQuota("ml", POOL, 8000)]
    jobs = [job("B", 8, 0, runs=2000, declared=3000, team="data"), job("O", 8, 700, runs=100, declared=100)]
    # when
    outcome = simulate(jobs, make_nodes(1), QueueMode(), "first-fit", quotas, whole=False)
    # then B is preempted at 700 (the card would free only at 3,000, past the owner's grace), loses the 100 s
    # since its checkpoint at 600 on 8 cards, and restarts at 800 when O ends, for its last 1,400 s
    assert outcome.preemptions == 1
    assert outcome.lost_work == 100 * 8000
    assert outcome.delays == [100, 0]
    assert outcome.makespan_s == 2200


def test_the_owner_waits_in_the_simulator_when_the_borrower_is_declared_to_end_within_the_grace():
    # given the same, but B is declared to end by 1,200, within 700 + 600
    quotas = [TeamQuota("ml", POOL, 8000)]
    jobs = [job("B", 8, 0, runs=1000, declared=1200, team="data"), job("O", 8, 700, runs=100, declared=100)]
    # when
    outcome = simulate(jobs, make_nodes(1), QueueMode(), "first-fit", quotas, whole=False)
    # then nobody is preempted: O starts when B really ends
    assert outcome.preemptions == 0
    assert outcome.delays == [0, 300]
