"""seed_demo prices the demo pools from the public price file when it is there, leaves pools with no
public price for their model unpriced, and still seeds without the file."""

from decimal import Decimal

import pytest

from audit.models import Event
from billing_app.models import PoolPrice
from billing_app.selectors import price_in_force
from billing_app.services import set_pool_price
from demo.seed import seed_demo
from scheduler_app.models import Pool

pytestmark = pytest.mark.django_db


def price_of(name: str):
    price = price_in_force(Pool.objects.get(name=name))
    return price and price.usd_per_gpu_hour


def test_seed_demo_prices_the_a100_pools_from_the_public_medians_and_leaves_rtx4090_unpriced(price_file):
    path = price_file(
        [
            ("A100-80GB", "4.0", "1.0"),
            ("A100-80GB", "5.0", "2.0"),
            ("A100-80GB", "6.0", ""),
            ("A100", "1.0", "0.5"),  # another model: not the demo's A100-80GB
            ("RTX6000", "0.9", ""),
        ]
    )

    seed_demo(path)

    assert price_of("a100-80gb") == Decimal("5.000000")
    assert price_of("a100-80gb-spot") == Decimal("1.500000")
    assert price_of("rtx4090") is None  # no public RTX-4090 price in the file: none is made up
    source = price_in_force(Pool.objects.get(name="a100-80gb")).source
    assert source == f"median of 3 public on-demand prices for A100-80GB in {path}"
    spot_source = price_in_force(Pool.objects.get(name="a100-80gb-spot")).source
    assert spot_source.startswith("median of 2 public spot prices for A100-80GB")


def test_seed_demo_prices_rtx4090_when_the_file_lists_it_under_another_spelling(price_file):
    seed_demo(price_file([("RTX4090", "0.40", ""), ("RTX4090", "0.30", "")]))

    assert price_of("rtx4090") == Decimal("0.350000")
    assert price_of("a100-80gb") is None


def test_seed_demo_without_the_price_file_leaves_every_pool_unpriced(tmp_path):
    usernames = seed_demo(tmp_path / "no-such-file.csv")

    assert "ops" in usernames and Pool.objects.count() == 3
    assert not PoolPrice.objects.exists()


def test_seed_demo_with_a_malformed_price_file_still_seeds_and_prices_nothing(price_file):
    seed_demo(price_file([("A100-80GB", "4.0", ""), ("A100-80GB", "lots", "")]))

    assert Pool.objects.count() == 3
    assert not PoolPrice.objects.exists()


def test_seeding_again_adds_no_price_and_keeps_what_operators_set(price_file, operator):
    path = price_file([("A100-80GB", "4.0", "1.0")])
    seed_demo(path)
    ops = Pool.objects.get(name="a100-80gb")
    set_pool_price(ops, "3.00", actor=operator)
    rows, events = PoolPrice.objects.count(), Event.objects.count()

    seed_demo(path)

    assert (PoolPrice.objects.count(), Event.objects.count()) == (rows, events)
    assert price_of("a100-80gb") == Decimal("3.00")


def test_the_demo_spot_pool_replays_recorded_spot_prices_so_they_move(price_file):
    import datetime as dt

    from billing_app.feeds import advance_spot_feeds
    from billing_app.models import FeedKind, SpotFeed
    from billing_app.prices import price_in_force as in_force

    seed_demo(price_file([("A100-80GB", "4.0", "1.0")]))
    spot = Pool.objects.get(name="a100-80gb-spot")
    feed = SpotFeed.objects.get(pool=spot)
    assert feed.kind == FeedKind.REPLAY
    seen = []
    for seconds in range(0, 600, 10):  # ten minutes of the demo, a recorded day every second
        now = feed.started_at + dt.timedelta(seconds=seconds)
        advance_spot_feeds(now)
        seen.append(in_force(spot, "spot", now))
    assert len(set(seen)) >= 3
    assert len(set(seen[:6])) >= 2  # it moves within the demo's first minute
