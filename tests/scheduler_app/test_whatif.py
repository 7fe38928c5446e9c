"""The what-if replay and its runs on a small hand-made history (whatif_helpers: three 10-minute
whole-card jobs that queued on one card)."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from billing_app.models import PoolPrice
from demo.seed import seed_demo
from scheduler_app import tasks
from scheduler_app.choices import CapacityType, WhatIfStatus
from scheduler_app.models import WhatIfRun
from scheduler_app.passes import dispatch
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.whatif import STALE_AFTER, run_queued_what_ifs, run_what_if, start_what_if
from scheduler_app.whatif import replay
from teams.permissions import NotAllowed
from tests.scheduler_app.whatif_helpers import T0, record_history


@pytest.fixture
def history(team, member, make_node, pool):
    return record_history(team, member, make_node("a100-1", gpus=1), pool)


def scenario(period, **changes):
    return replay.parse_scenario({**period, **changes})


def test_the_actual_side_is_what_the_history_recorded(history):
    result = replay.run(scenario(history))

    assert result["requests"] == 3
    assert result["actual"]["teams"]["vision"]["mean_delay_s"] == pytest.approx((0 + 590 + 1180) / 3, abs=0.1)
    # 1800 card-seconds allocated on one card over the hour the history covers (from job-0's submit)
    assert result["actual"]["utilization"] == pytest.approx(1800 / 3600, abs=1e-4)
    assert result["actual"]["cost_usd"] == "4.00"  # 1 card x 4 USD x 1 h


def test_a_cluster_younger_than_the_period_is_measured_and_priced_over_its_own_life(history):
    # given a week's period of which the cluster's history (its first request at T0) covers the last hour
    a_week = {**history, "start": (T0 - dt.timedelta(days=7)).isoformat()}

    result = replay.run(scenario(a_week))

    assert result["covered"] == {"start": T0.isoformat(), "end": history["end"], "seconds": 3600}
    assert result["actual"]["cost_usd"] == result["scenario"]["cost_usd"] == "4.00"  # not a week's 672.00
    assert result["actual"]["utilization"] == pytest.approx(0.5, abs=1e-4)  # not 1800 s of a week


def test_work_of_requests_submitted_before_the_period_is_on_neither_side(history):
    after_the_first = {**history, "start": (T0 + dt.timedelta(seconds=5)).isoformat()}

    result = replay.run(replay.parse_scenario(after_the_first))

    assert result["requests"] == 2
    # job-0 still ran 595 s inside the period, but only the two replayed jobs' 1200 s count
    assert result["actual"]["utilization"] == pytest.approx(1200 / 3595, abs=1e-4)
    assert result["scenario"]["utilization"] == pytest.approx(1200 / 3595, abs=1e-4)


def test_a_replay_of_the_same_cluster_reproduces_the_recorded_delays(history):
    result = replay.run(scenario(history))

    assert result["scenario"]["mean_delay_s"] == pytest.approx(result["actual"]["mean_delay_s"], abs=1)
    assert result["scenario"]["p95_delay_s"] == pytest.approx(result["actual"]["p95_delay_s"], abs=1)


def test_more_nodes_lower_the_delay_and_cost_more(history):
    same = replay.run(scenario(history))
    more = replay.run(scenario(history, nodes={"a100": 2}))

    assert more["scenario"]["gpus"] == 3
    assert more["scenario"]["p95_delay_s"] == 0 < same["scenario"]["p95_delay_s"]
    assert Decimal(more["scenario"]["cost_usd"]) == 3 * Decimal(same["scenario"]["cost_usd"])


def test_the_recommendation_is_the_cheapest_addition_that_meets_the_target(history, make_node):
    cheap = create_pool(name="l4", gpu_model="L4", capacity_type=CapacityType.ON_DEMAND)
    make_node("l4-1", gpus=1, pool=cheap, memory_mib=24576)
    PoolPrice.objects.create(
        pool=cheap, usd_per_gpu_hour=Decimal("1.00"), effective_from=T0 - dt.timedelta(days=1)
    )

    # Two cards for three jobs: the third waits ~590 s; a third card (either pool) brings it to 0.
    result = replay.run(scenario(history, target_p95_s=60))

    assert result["scenario"]["p95_delay_s"] > 60
    recommendation = result["recommendation"]
    assert recommendation["meets"] is True
    assert recommendation["change"] == {"pool": "l4", "nodes": 1, "gpus": 1}
    assert recommendation["cost_usd"] == "1.00"  # 1 card x 1 USD x the 1 h covered, not the a100's 4.00
    assert recommendation["p95_delay_s"] <= 60


def test_the_search_never_replays_nodes_no_job_may_use(history, make_node, monkeypatch):
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    make_node("spot-1", gpus=1, pool=spot)
    PoolPrice.objects.create(
        pool=spot, usd_per_gpu_hour=Decimal("0.50"), effective_from=T0 - dt.timedelta(days=1)
    )
    replayed_pools = []
    real_simulate = replay.simulate

    def counting(jobs, nodes, *args, **kwargs):
        replayed_pools.append(sorted(n.pool for n in nodes))
        return real_simulate(jobs, nodes, *args, **kwargs)

    monkeypatch.setattr(replay, "simulate", counting)

    result = replay.run(scenario(history, target_p95_s=60))

    # The on-demand jobs may not run on spot: its cheaper nodes are never tried; two more a100 cards
    # (three for three jobs) are the first that meet the target.
    assert result["recommendation"]["change"] == {"pool": "a100", "nodes": 2, "gpus": 2}
    assert [pools.count("a100-spot") for pools in replayed_pools] == [1, 1, 1]
    assert [pools.count("a100") for pools in replayed_pools] == [1, 2, 3]


def test_no_recommendation_is_needed_when_the_scenario_meets_the_target(history):
    result = replay.run(scenario(history, nodes={"a100": 2}, target_p95_s=60))

    assert result["recommendation"]["meets"] is True
    assert result["recommendation"]["change"] is None


def test_removing_every_node_of_the_pool_leaves_the_jobs_unplaceable(history):
    result = replay.run(scenario(history, nodes={"a100": -1}))

    assert result["unplaceable"] == 3
    assert result["scenario"]["requests"] == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"start": "yesterday"}, "start"),
        ({"start": "2026-01-01T00:00:00"}, "start"),  # no time zone
        ({"end": (T0 - dt.timedelta(hours=2)).isoformat()}, "end"),  # before the start
        ({"policy": "random"}, "policy"),
        ({"queue": "lifo"}, "queue"),
        ({"quotas": [{"team": "nobody", "pool": "a100", "guaranteed_milli": 1000}]}, "quotas"),
        ({"quotas": [{"team": "vision", "pool": "a100", "guaranteed_milli": -1}]}, "quotas"),
        ({"nodes": {"a100": -2}}, "nodes"),
        ({"nodes": {"h100": 1}}, "nodes"),
        ({"target_p95_s": "fast"}, "target_p95_s"),
    ],
)
def test_a_bad_scenario_names_its_field_and_queues_nothing(history, operator, changes, field):
    with pytest.raises(ValidationError) as error:
        start_what_if(actor=operator, data={**history, **changes})

    assert field in error.value.message_dict
    assert not WhatIfRun.objects.exists()


def test_a_period_without_placed_requests_is_refused(history, operator):
    empty = {
        "start": (T0 - dt.timedelta(hours=5)).isoformat(),
        "end": (T0 - dt.timedelta(hours=4)).isoformat(),
    }

    with pytest.raises(ValidationError) as error:
        start_what_if(actor=operator, data=empty)

    assert "start" in error.value.message_dict
    assert not WhatIfRun.objects.exists()


def test_a_queued_run_is_claimed_once_and_keeps_its_progress(
    history, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        run = start_what_if(actor=operator, data={**history, "target_p95_s": 60})
    assert run.status == WhatIfStatus.QUEUED and run.progress == 0

    assert run_what_if(run.pk) is True
    assert run_what_if(run.pk) is False  # a repeated task finds it claimed
    run.refresh_from_db()
    assert run.status == WhatIfStatus.SUCCEEDED and run.progress == 100
    assert run.result["requests"] == 3 and run.started_at <= run.finished_at


def test_progress_is_written_while_the_run_runs(
    history, operator, monkeypatch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        run = start_what_if(actor=operator, data=history)
    seen = []
    real_run = replay.run

    def watched(scenario, progress):
        def spy(fraction):
            progress(fraction)
            seen.append(WhatIfRun.objects.values_list("status", "progress").get(pk=run.pk))

        return real_run(scenario, spy)

    monkeypatch.setattr(replay, "run", watched)

    assert run_queued_what_ifs() == 1
    assert seen and all(status == WhatIfStatus.RUNNING for status, _ in seen)
    assert max(percent for _, percent in seen) > 0


def test_a_failing_replay_ends_failed_with_its_error(
    history, operator, monkeypatch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        run = start_what_if(actor=operator, data=history)

    def broken(scenario, progress):
        raise RuntimeError("simulator exploded")

    monkeypatch.setattr(replay, "run", broken)
    run_what_if(run.pk)

    run.refresh_from_db()
    assert run.status == WhatIfStatus.FAILED and "simulator exploded" in run.error and run.result is None


def test_only_operators_start_what_ifs(history, member):
    with pytest.raises(NotAllowed):
        start_what_if(actor=member, data=history)
    assert not WhatIfRun.objects.exists()


def test_in_the_embedded_default_a_started_run_wakes_the_what_if_thread_on_commit(
    history, operator, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.REDIS_URL = ""
    woken = []
    monkeypatch.setattr(dispatch.embedded_what_if, "wake", lambda: woken.append(True))

    with django_capture_on_commit_callbacks(execute=True):
        start_what_if(actor=operator, data=history)

    assert woken == [True]


def test_in_production_a_started_run_is_queued_as_a_celery_task_on_commit(
    history, operator, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.REDIS_URL = "redis://127.0.0.1:6379/9"
    sent = []
    monkeypatch.setattr(tasks.what_if, "apply_async", lambda args, **options: sent.append(args))

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = start_what_if(actor=operator, data=history)
    assert sent == []  # nothing before the commit
    for callback in callbacks:
        callback()

    assert sent == [(run.pk,)]
    assert tasks.what_if(run.pk) is True and tasks.what_if(run.pk) is False  # claimed once


def test_the_sweep_fails_a_run_whose_worker_went_silent_and_leaves_a_live_one(
    history, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        silent = start_what_if(actor=operator, data=history)
        live = start_what_if(actor=operator, data=history)
    long_ago = timezone.now() - STALE_AFTER - dt.timedelta(minutes=1)
    WhatIfRun.objects.filter(pk=silent.pk).update(status=WhatIfStatus.RUNNING, heartbeat_at=long_ago)
    WhatIfRun.objects.filter(pk=live.pk).update(status=WhatIfStatus.RUNNING, heartbeat_at=timezone.now())

    assert run_queued_what_ifs() == 0

    silent.refresh_from_db(), live.refresh_from_db()
    assert silent.status == WhatIfStatus.FAILED and "stopped" in silent.error
    assert live.status == WhatIfStatus.RUNNING


def test_the_demos_week_replays_on_its_cluster_with_work_that_queued(db):
    seed_demo()
    now = timezone.now()
    period = {"start": (now - dt.timedelta(days=9)).isoformat(), "end": now.isoformat()}

    result = replay.run(replay.parse_scenario({**period, "nodes": {"rtx4090": 1}}))

    # the seeded week (the live demo requests add three placed ones), over the week and more it covers
    assert result["requests"] > 300 and result["unplaceable"] == 0
    assert 7 * 86400 < result["covered"]["seconds"] < 9 * 86400
    assert result["actual"]["gpus"] == 48 and result["scenario"]["gpus"] == 52  # 3x8 + 2x8 + 2x4, +4
    assert set(result["scenario"]["teams"]) == {"vision", "language"}
    assert 0.3 < result["actual"]["utilization"] < 0.8
    assert result["actual"]["p95_delay_s"] > 3600  # something worth deciding on


@pytest.mark.parametrize("queue", sorted(replay.QUEUE_MODES))
def test_every_queue_mode_replays_every_request_and_more_cards_never_wait_longer(history, queue):
    same = replay.run(scenario(history, queue=queue))
    more = replay.run(scenario(history, queue=queue, nodes={"a100": 2}))

    assert same["scenario"]["requests"] == more["scenario"]["requests"] == 3
    assert more["scenario"]["p95_delay_s"] <= same["scenario"]["p95_delay_s"]
