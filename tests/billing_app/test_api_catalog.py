"""The catalog's operator settings over the API: slice premiums/discounts and a pool's spot feed."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing_app.models import PoolPrice, SharePremium, SpotFeed
from billing_app.selectors import price_per_hour

PREMIUMS = "/api/v1/prices/premiums/"


def test_an_operator_sets_a_premium_and_every_price_of_that_size_follows(api_client, operator, member, pool):
    PoolPrice.objects.create(
        pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=timezone.now() - dt.timedelta(hours=1)
    )
    response = api_client(operator).post(PREMIUMS, {"gpu_milli": 125, "multiplier": "1.2"}, format="json")
    assert response.status_code == 201 and response.json()["multiplier"] == "1.2000"
    assert api_client(member).get(PREMIUMS).json()[0]["gpu_milli"] == 125
    assert price_per_hour(125, gpu_model="A100-80GB").by_model[0].on_demand.usd_per_hour == Decimal("0.60")
    assert price_per_hour(250, gpu_model="A100-80GB").by_model[0].on_demand.usd_per_hour == Decimal("1.00")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpu_milli": 125, "multiplier": 1.2}, "multiplier"),  # a JSON number: refused, like prices
        ({"gpu_milli": 125, "multiplier": "0"}, "multiplier"),
        ({"gpu_milli": 125, "multiplier": "11"}, "multiplier"),
        ({"gpu_milli": 0, "multiplier": "1.1"}, "gpu_milli"),
        ({"gpu_milli": 125, "multiplier": "1.1", "effective_from": "2001-01-01T00:00:00Z"}, "effective_from"),
    ],
)
def test_bad_premiums_are_refused_and_change_nothing(api_client, operator, body, field):
    response = api_client(operator).post(PREMIUMS, body, format="json")
    assert response.status_code == 400 and field in str(response.json())
    assert not SharePremium.objects.exists()


def test_members_cannot_set_premiums_or_feeds(api_client, member, spot_pool):
    assert (
        api_client(member).post(PREMIUMS, {"gpu_milli": 125, "multiplier": "1.1"}, format="json").status_code
        == 403
    )
    url = f"/api/v1/pools/{spot_pool.name}/spot-feed/"
    assert api_client(member).put(url, {"kind": "occupancy"}, format="json").status_code == 403


def test_an_operator_sets_a_pools_feed(api_client, operator, spot_pool, pool):
    url = f"/api/v1/pools/{spot_pool.name}/spot-feed/"
    body = {"kind": "replay", "replay_file": "gcp", "replay_speedup": 600}
    response = api_client(operator).put(url, body, format="json")
    assert response.status_code == 200, response.json()
    assert SpotFeed.objects.get(pool=spot_pool).replay_speedup == 600
    bad = api_client(operator).put(
        url, {"kind": "occupancy", "min_fraction": "0.9", "max_fraction": "0.2"}, format="json"
    )
    assert bad.status_code == 400 and "min_fraction" in str(bad.json())
    on_demand = api_client(operator).put(
        f"/api/v1/pools/{pool.name}/spot-feed/", {"kind": "occupancy"}, format="json"
    )
    assert on_demand.status_code == 400 and "on-demand" in str(on_demand.json())
    assert SpotFeed.objects.get(pool=spot_pool).kind == "replay"
