"""/api/v1/prices/ and /api/v1/pools/{name}/price/: anyone signed in reads, operators set; one error
format; money as decimal strings. The estimate carries the price per hour."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import Event
from billing_app.models import PoolPrice
from billing_app.selectors import price_in_force
from billing_app.services import set_pool_price
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool

PRICES = "/api/v1/prices/"


def price_url(pool) -> str:
    return f"/api/v1/pools/{pool.name}/price/"


def test_a_member_lists_the_price_in_force_of_each_priced_pool(api_client, member, pool, spot_pool, operator):
    create_pool(name="unpriced", gpu_model="L4", capacity_type=CapacityType.ON_DEMAND)
    set_pool_price(pool, "2.00", actor=operator)
    set_pool_price(pool, "2.50", actor=operator, source="contract")
    set_pool_price(spot_pool, "0.75", actor=operator, effective_from=timezone.now() + dt.timedelta(days=1))

    response = api_client(member).get(PRICES)

    assert response.status_code == 200
    (only,) = response.json()  # the spot price starts tomorrow; the unpriced pool is left out
    assert only == {
        "pool": "a100",
        "gpu_model": "A100-80GB",
        "capacity_type": "on-demand",
        "usd_per_gpu_hour": "2.500000",
        "effective_from": only["effective_from"],
        "source": "contract",
    }
    assert dt.datetime.fromisoformat(only["effective_from"]) == price_in_force(pool).effective_from


def test_listing_prices_takes_the_same_queries_however_many_pools_are_priced(api_client, member, operator):
    client = api_client(member)
    client.get(PRICES)  # the token's first use writes its last-used time once

    def queries_with(n):
        for i in range(n):
            pool = create_pool(name=f"p{n}-{i}", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
            set_pool_price(pool, "1.00", actor=operator)
        with CaptureQueriesContext(connection) as captured:
            assert client.get(PRICES).status_code == 200
        return len(captured)

    assert queries_with(1) == queries_with(4)


def test_anonymous_cannot_list_prices(db, api_client):
    response = api_client().get(PRICES)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_an_operator_sets_a_pool_price(api_client, operator, pool):
    response = api_client(operator).put(price_url(pool), {"usd_per_gpu_hour": "2.50"}, format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["pool"], body["usd_per_gpu_hour"], body["source"]) == ("a100", "2.500000", "set by ops")
    assert str(price_in_force(pool).usd_per_gpu_hour) == "2.500000"
    assert Event.objects.filter(content_type__model="pool", data__usd_per_gpu_hour__to="2.500000").exists()


def test_an_operator_schedules_a_price_for_later(api_client, operator, pool):
    later = (timezone.now() + dt.timedelta(days=7)).isoformat()

    response = api_client(operator).put(
        price_url(pool),
        {"usd_per_gpu_hour": "3", "effective_from": later, "source": "new contract"},
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert price_in_force(pool) is None
    assert PoolPrice.objects.get().source == "new contract"


@pytest.mark.parametrize("user", ["team_admin", "member", "outsider"])
def test_only_operators_set_prices(api_client, pool, user, request):
    response = api_client(request.getfixturevalue(user)).put(
        price_url(pool), {"usd_per_gpu_hour": "2.50"}, format="json"
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert not PoolPrice.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"usd_per_gpu_hour": 2.5}, "usd_per_gpu_hour"),  # a JSON number: refused, it may not hold cents
        ({"usd_per_gpu_hour": 2}, "usd_per_gpu_hour"),
        ({"usd_per_gpu_hour": "0"}, "usd_per_gpu_hour"),
        ({"usd_per_gpu_hour": "-1.00"}, "usd_per_gpu_hour"),
        ({"usd_per_gpu_hour": "two"}, "usd_per_gpu_hour"),
        ({"usd_per_gpu_hour": "1.0000001"}, "usd_per_gpu_hour"),
        ({"usd_per_gpu_hour": "10000"}, "usd_per_gpu_hour"),
        ({}, "usd_per_gpu_hour"),
        ({"usd_per_gpu_hour": "2.50", "effective_from": "2020-01-01T00:00:00Z"}, "effective_from"),
        ({"usd_per_gpu_hour": "2.50", "effective_from": "2030-01-01T00:00:00"}, "effective_from"),
        ({"usd_per_gpu_hour": "2.50", "source": 7}, "source"),
    ],
)
def test_a_bad_price_is_400_naming_the_field(api_client, operator, pool, body, field):
    response = api_client(operator).put(price_url(pool), body, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error" and list(error["fields"]) == [field]
    assert not PoolPrice.objects.exists()


def test_a_json_number_is_refused_with_a_message_that_says_why(api_client, operator, pool):
    response = api_client(operator).put(price_url(pool), {"usd_per_gpu_hour": 2.5}, format="json")

    assert response.json()["error"]["fields"]["usd_per_gpu_hour"] == [
        'Give the amount as a JSON string, e.g. "2.50".'
    ]


def test_pricing_an_unknown_pool_is_404(api_client, operator, db):
    response = api_client(operator).put(
        "/api/v1/pools/nowhere/price/", {"usd_per_gpu_hour": "1"}, format="json"
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_estimate_gives_the_price_per_hour_on_demand_and_spot(
    api_client, member, make_node, pool, spot_pool, operator
):
    make_node(gpus=2)
    set_pool_price(pool, "2.50", actor=operator)
    set_pool_price(spot_pool, "1.00", actor=operator)

    response = api_client(member).post(
        "/api/v1/requests/estimate/", {"name": "x", "gpu_milli": 250}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert response.json()["price"] == {"usd_per_hour": "0.63", "pool": "a100", "gpu_model": "A100-80GB"}
    assert response.json()["prices"] == {
        "gpu_model": "A100-80GB",
        "on_demand": {
            "usd_per_hour": "0.63",
            "pool": "a100",
            "gpu_model": "A100-80GB",
        },  # 0.625 rounds half-up
        "spot": {"usd_per_hour": "0.25", "pool": "a100-spot", "gpu_model": "A100-80GB"},
        "spot_saving_percent": 60,
    }


def test_the_estimate_says_null_where_no_pool_is_priced(api_client, member, make_node):
    make_node(gpus=2)

    response = api_client(member).post(
        "/api/v1/requests/estimate/", {"name": "x", "gpu_milli": 250}, format="json"
    )

    answer = response.json()
    assert answer["price"] is None and answer["prices_by_model"] == []
    assert answer["prices"] == {
        "gpu_model": "A100-80GB",
        "on_demand": None,
        "spot": None,
        "spot_saving_percent": None,
    }
