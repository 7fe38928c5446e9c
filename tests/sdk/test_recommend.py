"""ResourceManager.recommend(...): the portal's recommendation with Decimal money; errors as the SDK's."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from gpu_portal_sdk.errors import ValidationError

from billing_app.services import set_pool_price
from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest


def test_recommend_returns_the_cheapest_option_meeting_the_deadline_with_decimal_costs(
    connect, member, team, pool, operator
):
    set_pool_price(pool, "3.00", actor=operator)
    end = timezone.now() - dt.timedelta(hours=1)
    for milli, seconds in ((1000, 3600), (750, 4140), (500, 5760)):
        GpuRequest.objects.create(
            team=team,
            user=member,
            name="train",
            gpu_milli=milli,
            command="python train.py",
            state=RequestState.SUCCEEDED,
            started_at=end - dt.timedelta(seconds=seconds),
            ended_at=end,
        )

    rec = connect(member).recommend("python  train.py", deadline_s=4500)

    assert rec.source == "history" and rec.gpu_model == "A100-80GB"
    # On-demand only: 0.75 (4140 s) costs 0.75 x 1.15 h x $3 = $2.59 and meets 4500 s at its band's top.
    assert (rec.chosen.gpu_milli, rec.chosen.capacity_type) == (750, "on-demand")
    assert rec.chosen.cost_usd == Decimal("2.59")
    assert rec.pareto and all(isinstance(o.cost_usd, Decimal) for o in rec.options)


def test_recommend_with_a_bad_budget_raises_the_sdks_validation_error(connect, member, team):
    with pytest.raises(ValidationError) as refused:
        connect(member).recommend(budget_usd="-1")
    assert "budget_usd" in str(refused.value.fields)
