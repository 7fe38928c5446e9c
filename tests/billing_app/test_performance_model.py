"""The cost/performance model (billing_app.performance): the fit, the band, the recommendation, resizes."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.perf_model import backtest, field_fit
from billing_app.performance import (
    Curve,
    Run,
    Utilization,
    candidate_shapes,
    fit,
    pareto_front,
    prior_for,
    recommend,
    slowdown,
    suggest_resize,
)

FIELD = [Run(1000, 1, 3600.0), Run(750, 1, 3600 * 1.15), Run(500, 1, 3600 * 1.6)]


def test_the_fit_reproduces_the_three_field_points_within_two_percent():
    curve = fit(FIELD)
    for run in FIELD:
        assert curve.runtime(run.share) == pytest.approx(run.runtime_s, rel=0.02)
    assert curve.source == "history"
    assert (curve.a, curve.s) == pytest.approx((0.25, 0.9), abs=0.011)


def test_the_field_fit_in_the_bench_agrees():
    for _share, field, model in field_fit():
        assert model == pytest.approx(field, rel=0.02)


def test_the_fit_recovers_a_curve_of_its_own_family_from_runs_at_other_shares():
    truth = Curve(5000.0, 0.1, 0.6, "prior", 0.3)
    runs = [Run(m, 1, truth.runtime(m / 1000)) for m in (250, 375, 1000)] + [Run(1000, 4, truth.runtime(4))]
    curve = fit(runs, task_type="inference")
    for milli in (125, 500, 625, 875):
        assert curve.runtime(milli / 1000) == pytest.approx(truth.runtime(milli / 1000), rel=0.02)
    assert curve.runtime(2) == pytest.approx(truth.runtime(2), rel=0.02)


def test_whole_cards_follow_amdahl_and_a_fraction_below_saturation_slows_the_gpu_part():
    assert slowdown(2, 0.25, 0.9) == pytest.approx(0.25 + 0.75 / 2)
    assert slowdown(0.6, 0.25, 0.9) == pytest.approx(0.25 + 0.75 * 1.5)
    assert slowdown(0.95, 0.25, 0.9) == 1.0


def test_with_no_runs_the_prior_gives_the_shape_and_the_hint_the_scale_with_a_wide_band():
    curve = fit([], task_type="training", t1_hint_s=1800)
    assert (curve.t1_s, curve.source, curve.band) == (1800, "prior", 0.30)
    assert curve.runtime(0.5) > curve.runtime(1)


def test_a_job_keeping_thirty_percent_of_a_card_busy_loses_little_at_half():
    prior, starved = prior_for("training", Utilization(1000, 0.3))
    assert not starved
    assert slowdown(0.5, prior.a, prior.s) == pytest.approx(1.0)
    curve = fit([], utilization=Utilization(1000, 0.3), t1_hint_s=1000)
    assert curve.source == "utilization"
    assert curve.band < fit([], t1_hint_s=1000).band


def test_a_job_busy_near_all_of_a_partial_share_is_starved():
    _, starved = prior_for("training", Utilization(500, 0.97))
    assert starved


def test_the_band_widens_away_from_the_observed_shares():
    curve = fit(FIELD)
    assert curve.band_at(1.0) == pytest.approx(curve.band)
    assert curve.band_at(0.125) > curve.band_at(0.5)
    point = curve.point(0.125)
    assert point.low_s < point.runtime_s < point.high_s


def test_the_pareto_front_drops_options_beaten_on_both_time_and_cost():
    rec = recommend(fit(FIELD), {"on_demand": Decimal("3.00")}, shapes=[(500, 1), (1000, 1), (1000, 2)])
    front = {(o.gpu_milli, o.num_gpus) for o in rec.options if o.pareto}
    # 0.5: 1.6 h x 0.5 = 0.8 GPU-h; 1.0: 1 GPU-h in 1 h; 2 cards: 0.625 h x 2 = 1.25 GPU-h, fastest.
    assert front == {(500, 1), (1000, 1), (1000, 2)}
    assert pareto_front(list(rec.options)) == {0, 1, 2}


def test_the_recommendation_is_the_cheapest_option_meeting_the_deadline_at_the_slow_end_of_its_band():
    curve = Curve(3600.0, 0.25, 0.9, "history", 0.05, (0.5, 0.75, 1.0))
    prices = {"on_demand": Decimal("3.00"), "spot": Decimal("1.00")}
    shapes = [(500, 1), (750, 1), (1000, 1)]
    # Deadline 1.2 h: 0.5 (1.6 h) misses; 0.75 takes 1.15 h, upper band 1.2075 h, misses too; 1.0 fits.
    rec = recommend(curve, prices, deadline_s=1.2 * 3600, shapes=shapes)
    assert (rec.chosen.gpu_milli, rec.chosen.capacity_type) == (1000, "spot")
    assert rec.chosen.cost_usd == Decimal("1.00")
    # Without a deadline 0.5 on spot is cheapest: 0.5 x 1.6 h x $1 = $0.80.
    rec = recommend(curve, prices, shapes=shapes)
    chosen = rec.chosen
    assert (chosen.gpu_milli, chosen.capacity_type, chosen.cost_usd) == (500, "spot", Decimal("0.80"))


def test_spot_time_stretch_can_make_on_demand_the_pick_for_a_tight_deadline():
    curve = Curve(3600.0, 0.25, 0.9, "history", 0.0, (1.0,))
    prices = {"on_demand": Decimal("3.00"), "spot": Decimal("1.00")}
    rec = recommend(curve, prices, deadline_s=3700, shapes=[(1000, 1)], spot_time_factor=1.1)
    assert rec.chosen.capacity_type == "on_demand"


def test_a_budget_too_small_chooses_nothing_and_says_why():
    rec = recommend(fit(FIELD), {"on_demand": Decimal("3.00")}, budget_usd=Decimal("0.10"))
    assert rec.chosen is None
    assert "budget" in rec.reason
    assert rec.cheapest is not None


def test_candidate_shapes_are_eighths_then_whole_cards():
    shapes = candidate_shapes(125, 4)
    assert shapes[0] == (125, 1) and (1000, 1) in shapes and shapes[-1] == (1000, 4)
    assert len(shapes) == 8 + 2


def test_an_underused_card_is_offered_a_smaller_share_and_a_starved_share_a_bigger_one():
    down = suggest_resize(1000, 0.3)
    assert down is not None and down.to_milli < 1000 and down.slowdown_percent <= 5
    up = suggest_resize(500, 0.97)
    assert up is not None and up.to_milli == 625 and up.slowdown_percent < 0
    assert suggest_resize(1000, 0.95) is None


def test_the_backtest_meets_its_error_target_on_another_seed():
    errors, _, _, runs = backtest(seed=3, n_workloads=120)
    every = sorted(e for values in errors.values() for e in values)
    assert runs >= 500
    assert every[len(every) // 2] < 0.10


@given(
    t1=st.floats(60, 1e5),
    a=st.floats(0, 1),
    s=st.floats(0.05, 1),
    band=st.floats(0, 0.5),
    deadline=st.one_of(st.none(), st.floats(30, 3e5)),
    budget=st.one_of(st.none(), st.decimals("0.01", "500", places=2)),
    od=st.decimals("0.10", "10", places=2),
    spot=st.decimals("0.05", "10", places=2),
)
def test_the_pick_meets_the_limits_and_no_option_meeting_them_costs_less(
    t1, a, s, band, deadline, budget, od, spot
):
    rec = recommend(
        Curve(t1, a, s, "history", band, (1.0,)),
        {"on-demand": od, "spot": spot},
        deadline_s=deadline,
        budget_usd=budget,
    )

    def meets(o):
        return (deadline is None or o.runtime_high_s <= deadline) and (
            budget is None or o.cost_high_usd <= budget
        )

    meeting = [o for o in rec.options if meets(o)]
    if rec.chosen is None:
        assert not meeting
    else:
        assert meets(rec.chosen)
        assert all(rec.chosen.cost_usd <= o.cost_usd for o in meeting)
    assert any(o.pareto for o in rec.options)
    for o in rec.options:  # the front: nothing both faster and cheaper
        if o.pareto:
            assert not any(p.runtime_s < o.runtime_s and p.cost_usd < o.cost_usd for p in rec.options)
