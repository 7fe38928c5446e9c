"""/api/v1/prices/quote/, /api/v1/prices/history/, /api/v1/prices/upload/ and the estimate's quote:
money as decimal strings, bad input as the error envelope with nothing written."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from billing_app.models import PoolPrice

QUOTE = "/api/v1/prices/quote/"
HISTORY = "/api/v1/prices/history/"
UPLOAD = "/api/v1/prices/upload/"


@pytest.fixture
def priced(pool, spot_pool):
    start = timezone.now() - dt.timedelta(hours=2)
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=start)
    PoolPrice.objects.create(pool=spot_pool, usd_per_gpu_hour=Decimal("1.00"), effective_from=start)
    PoolPrice.objects.create(
        pool=spot_pool, usd_per_gpu_hour=Decimal("1.20"), effective_from=start + dt.timedelta(hours=1)
    )
    return pool, spot_pool


def test_quote_compares_on_demand_and_spot_as_decimal_strings(api_client, member, priced):
    shape = {
        "gpu_model": "A100-80GB",
        "gpu_milli": 500,
        "num_gpus": 2,
        "max_duration_s": 36000,
        "checkpoint_interval_s": 1800,
    }
    body = api_client(member).get(QUOTE, shape).json()
    assert body["on_demand"] == {
        "pool": "a100",
        "usd_per_gpu_hour": "4.000000",
        "usd_per_hour": "4.00",
        "expected_total_usd": "40.00",
    }
    assert body["spot"]["usd_per_hour"] == "1.20" and body["spot"]["expected_total_usd"] == "12.00"
    cost = body["spot_cost"]
    assert cost["reclaim"]["source"] == "prior"
    assert Decimal(cost["effective_total_usd"]) > Decimal("12.00")
    assert isinstance(cost["expected_reclaims"], str) and body["cheaper"] == "spot"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"gpu_model": "Z80", "gpu_milli": 500}, "gpu_model"),
        ({"gpu_model": "A100-80GB", "gpu_milli": 0}, "gpu_milli"),
        ({"gpu_model": "A100-80GB", "gpu_milli": 1500}, "gpu_milli"),
        ({"gpu_model": "A100-80GB", "gpu_milli": 500, "max_duration_s": "soon"}, "max_duration_s"),
        ({"gpu_milli": 500}, "gpu_model"),
    ],
)
def test_bad_quote_shapes_get_the_error_envelope(api_client, member, priced, params, field):
    response = api_client(member).get(QUOTE, params)
    assert response.status_code == 400
    assert field in str(response.json())


def test_history_gives_the_start_price_and_every_change(api_client, member, priced):
    body = api_client(member).get(HISTORY, {"hours": 3}).json()
    spot = next(h for h in body if h["pool"] == "a100-spot")
    assert [price for _, price in spot["points"]] == ["1.000000", "1.200000"]
    narrow = api_client(member).get(HISTORY, {"hours": 1}).json()
    # The last hour began after the change: only the price in force then.
    assert [p for _, p in next(h for h in narrow if h["pool"] == "a100-spot")["points"]] == ["1.200000"]
    assert api_client(member).get(HISTORY, {"hours": 0}).status_code == 400


def test_upload_through_the_api_all_or_nothing(api_client, operator, member, priced):
    _, spot_pool = priced
    bad = b"effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.10\n2001-01-01T00:00:00Z,abc\n"
    before = PoolPrice.objects.count()
    response = api_client(operator).post(
        UPLOAD, {"pool": spot_pool.name, "file": SimpleUploadedFile("p.csv", bad)}, format="multipart"
    )
    assert response.status_code == 400
    text = str(response.json())
    assert "line 3" in text and "in the past" in text and "not a number" in text and "line 2" not in text
    assert PoolPrice.objects.count() == before

    good = b"effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.10\n"
    response = api_client(operator).post(
        UPLOAD, {"pool": spot_pool.name, "file": SimpleUploadedFile("p.csv", good)}, format="multipart"
    )
    assert response.status_code == 201 and response.json()[0]["usd_per_gpu_hour"] == "1.100000"
    forbidden = api_client(member).post(
        UPLOAD, {"pool": spot_pool.name, "file": SimpleUploadedFile("p.csv", good)}, format="multipart"
    )
    assert forbidden.status_code == 403


def test_the_estimate_carries_the_quote(api_client, member, priced, make_node, team):
    make_node(gpus=2)
    body = {
        "team": team.slug,
        "gpu_milli": 500,
        "gpu_model": "A100-80GB",
        "max_duration_s": 7200,
        "task_type": "training",
    }
    response = api_client(member).post("/api/v1/requests/estimate/", body, format="json")
    assert response.status_code == 200, response.json()
    estimate = response.json()
    assert estimate["quote"]["on_demand"]["expected_total_usd"] == "4.00"  # 4.00 x 0.5 x 2 h
    assert estimate["quote"]["spot"]["usd_per_hour"] == "0.60"
    assert any("expected with" in line or "would not finish" in line for line in estimate["price_lines"])
