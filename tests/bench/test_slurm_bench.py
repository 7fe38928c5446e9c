"""bench.slurm at a tiny size against the real test cluster (run it under the Slurm lock, as every
Slurm test: flock /tmp/slurm-tests.lock pytest ...): both parts measure what they say."""

import random

import pytest

from bench.slurm import Timing, one_pass, percentile, report_timings, sched_interval, submit_to_running
from tests.slurm_backend.conftest import no_slurm_jobs, slurm_cluster, slurm_pool, team_accounts

__all__ = ["no_slurm_jobs", "slurm_cluster", "slurm_pool", "team_accounts"]  # the fixtures used here


@pytest.mark.postgres  # the embedded threads write beside the test: SQLite's shared cache locks tables
def test_the_bench_times_submit_to_running_beside_slurms_own(
    transactional_db, slurm_pool, slurm_cluster, team_accounts, member, team
):
    # The embedded threads run the passes and the syncs: they see only committed rows.
    timings = submit_to_running(slurm_pool, member, team, 2, random.Random(7))

    assert sched_interval(slurm_cluster["SLURM_CONF"]) == 2.0  # the test cluster's SchedulerParameters
    assert len(timings) == 2
    assert all(t.portal_s > 0 and t.slurm_s >= 0 and t.portal_s >= t.slurm_s - 1 for t in timings)


def test_the_bench_times_one_pass_and_one_sync_into_slurm(slurm_pool, team_accounts, member, team):
    batch = one_pass(slurm_pool, member, team, 8)

    assert (batch.requests, batch.placed, batch.accepted) == (8, 8, 8)
    assert batch.pass_s > 0 and batch.sync_s > 0


def test_the_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(1, 21)]

    assert (percentile(values, 50), percentile(values, 95), percentile(values, 100)) == (10.0, 19.0, 20.0)


def test_the_report_sets_the_portals_time_beside_slurms_and_judges_the_added_p95(capsys):
    report_timings([Timing(portal_s=3.0, slurm_s=2.0), Timing(portal_s=2.5, slurm_s=2.0)])

    printed = capsys.readouterr().out
    assert "added median 0.75 s p95 1.00 s" in printed and "portal p95 - Slurm p95 1.00 s" in printed
    assert "target on the added p95: met" in printed
