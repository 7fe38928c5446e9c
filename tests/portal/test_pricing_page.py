"""The pricing page: prices in force and their history chart data, the comparison for a shape, and the
operators' upload with one error per bad row and nothing written."""

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from billing_app.models import PoolPrice
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool


@pytest.fixture
def spot_pool(pool):
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    start = timezone.now() - dt.timedelta(hours=3)
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=start)
    PoolPrice.objects.create(pool=spot, usd_per_gpu_hour=Decimal("1.00"), effective_from=start)
    PoolPrice.objects.create(
        pool=spot, usd_per_gpu_hour=Decimal("1.30"), effective_from=start + dt.timedelta(hours=2)
    )
    return spot


def test_the_page_charts_each_pools_price_history(client, member, spot_pool):
    client.force_login(member)
    page = client.get("/prices/", {"hours": 6})
    assert page.status_code == 200
    html = page.content.decode()
    assert "vendor/plotly/plotly.min.js" in html and "js/prices.js" in html
    chart = json.loads(html.split('id="price-chart-data" type="application/json">')[1].split("</script>")[0])
    spot = next(c for c in chart if c["pool"] == "a100-spot")
    assert spot["y"] == ["1.000000", "1.300000", "1.300000"]  # the last price held until now
    assert "Upload a spot price file" not in html  # members do not upload


def test_the_price_in_force_shows_the_places_it_has_not_six(client, member, spot_pool, pool):
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("4.775"), effective_from=timezone.now())
    client.force_login(member)

    html = client.get("/prices/").content.decode()

    assert "$4.775" in html and "4.775000" not in html.split('id="price-chart-data"')[0]
    assert "$1.30" in html


def test_the_page_compares_a_shape_with_reclaims_counted(client, member, spot_pool):
    client.force_login(member)
    shape = {"gpu_model": "A100-80GB", "share": 500, "max_duration_h": "10", "checkpoint_interval_min": 30}
    html = client.get("/prices/", shape).content.decode()
    assert "$2.00" in html and "$20.00" in html  # on-demand: 4.00 x 0.5, over 10 h
    assert "$6.50" in html  # spot nominal: 1.30 x 0.5 x 10 h
    assert "Spot, reclaims counted" in html and "(prior)" in html
    bad = client.get("/prices/", shape | {"gpu_model": "Z80"}).content.decode()
    assert "Select a valid choice" in bad


def test_an_operator_upload_with_a_bad_row_writes_nothing(client, operator, spot_pool):
    client.force_login(operator)
    text = b"effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.10\n2099-01-02T00:00:00Z,zero\n"
    before = PoolPrice.objects.count()
    page = client.post("/prices/upload/", {"pool": spot_pool.pk, "file": SimpleUploadedFile("p.csv", text)})
    assert page.status_code == 400
    assert "line 3: &#x27;zero&#x27; is not a number." in page.content.decode()
    assert "Nothing was written" in page.content.decode()
    assert PoolPrice.objects.count() == before
    good = b"effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.10\n"
    page = client.post("/prices/upload/", {"pool": spot_pool.pk, "file": SimpleUploadedFile("p.csv", good)})
    assert page.status_code == 302
    assert PoolPrice.objects.count() == before + 1


def test_members_cannot_upload(client, member, spot_pool):
    client.force_login(member)
    text = b"effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.10\n"
    client.post("/prices/upload/", {"pool": spot_pool.pk, "file": SimpleUploadedFile("p.csv", text)})
    assert not PoolPrice.objects.filter(effective_from__year=2099).exists()


def test_an_operator_sets_a_pools_feed_from_the_page(client, operator, member, spot_pool):
    from billing_app.models import SpotFeed

    client.force_login(operator)
    fields = {
        "pool": spot_pool.pk,
        "kind": "occupancy",
        "min_fraction": "0.8",
        "max_fraction": "0.4",
        "replay_file": "gcp",
        "replay_speedup": 1,
    }
    page = client.post("/prices/feed/", fields)
    assert page.status_code == 400 and "cannot be above the full price" in page.content.decode()
    assert not SpotFeed.objects.exists()
    assert client.post("/prices/feed/", fields | {"min_fraction": "0.2"}).status_code == 302
    assert SpotFeed.objects.get(pool=spot_pool).min_fraction == Decimal("0.2")
    client.force_login(member)
    client.post("/prices/feed/", fields | {"min_fraction": "0.1"})
    assert SpotFeed.objects.get(pool=spot_pool).min_fraction == Decimal("0.2")
