"""Spot feeds: occupancy within the operator's bounds, replay time-shifted and looped, uploads that are
all-or-nothing with an error per bad row, and the periodic advance."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from billing_app.feeds import advance_spot_feeds, set_spot_feed, upload_prices
from billing_app.models import FeedKind, PoolPrice, SpotFeed
from billing_app.prices import price_in_force
from billing_app.spot_feeds import PriceUploadError, ReplaySeries, replay_price, replay_series
from scheduler_app.choices import CapacityType
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import submit_request
from teams.permissions import NotAllowed

SPOT = CapacityType.SPOT


@pytest.fixture
def on_demand_price(pool):
    return PoolPrice.objects.create(
        pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=timezone.now() - dt.timedelta(hours=1)
    )


def test_occupancy_feed_is_min_when_idle_and_max_when_full(
    spot_pool, on_demand_price, make_node, team, member
):
    make_node(name="spot-1", gpus=2, pool=spot_pool)
    set_spot_feed(spot_pool, actor=None, kind=FeedKind.OCCUPANCY, min_fraction="0.25", max_fraction="0.75")
    advance_spot_feeds()
    assert price_in_force(spot_pool, SPOT, timezone.now()) == Decimal("1.0000")  # 4.00 x 0.25, idle

    def run_one_card(name):
        fields = {"gpu_milli": 1000, "billing_mode": SPOT, "checkpoint_interval_s": 600}
        submit_request(user=member, team=team, name=name, pool_name=spot_pool.name, **fields)
        run_scheduling_pass()

    run_one_card("half")
    advance_spot_feeds()
    assert price_in_force(spot_pool, SPOT, timezone.now()) == Decimal("2.0000")  # half the cards: 0.5

    run_one_card("rest")
    rows_before = PoolPrice.objects.filter(pool=spot_pool).count()
    now = timezone.now()
    advance_spot_feeds(now)
    advance_spot_feeds(now)  # a rerun at the same instant writes nothing more
    assert price_in_force(spot_pool, SPOT, now) == Decimal("3.0000")  # full: 4.00 x 0.75, never above
    assert PoolPrice.objects.filter(pool=spot_pool).count() == rows_before + 1


def test_occupancy_without_an_on_demand_price_writes_nothing(spot_pool):
    set_spot_feed(spot_pool, actor=None, kind=FeedKind.OCCUPANCY)
    assert "no on-demand price" in advance_spot_feeds()[spot_pool.name]
    assert not PoolPrice.objects.filter(pool=spot_pool).exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"min_fraction": "0"}, "min_fraction"),
        ({"max_fraction": "1.5"}, "max_fraction"),
        ({"min_fraction": "0.8", "max_fraction": "0.5"}, "min_fraction"),
        ({"kind": "weather"}, "kind"),
        ({"kind": FeedKind.REPLAY, "replay_file": "ibm"}, "replay_file"),
    ],
)
def test_bad_feed_settings_are_refused_and_change_nothing(spot_pool, fields, field):
    with pytest.raises(ValidationError) as error:
        set_spot_feed(spot_pool, actor=None, **({"kind": FeedKind.OCCUPANCY} | fields))
    assert field in error.value.message_dict
    assert not SpotFeed.objects.exists()


def test_feeds_drive_spot_pools_only_and_operators_only(pool, spot_pool, member):
    with pytest.raises(ValidationError, match="on-demand"):
        set_spot_feed(pool, actor=None, kind=FeedKind.OCCUPANCY)
    with pytest.raises(NotAllowed):
        set_spot_feed(spot_pool, actor=member, kind=FeedKind.OCCUPANCY)


T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
SERIES = ReplaySeries("x", ((0.0, Decimal("1.0")), (600.0, Decimal("2.0")), (900.0, Decimal("3.0"))), 1200.0)


@pytest.mark.parametrize(
    ("elapsed_s", "speedup", "price"),
    [
        (0, 1, "1.0"),
        (599, 1, "1.0"),
        (600, 1, "2.0"),
        (899, 1, "2.0"),
        (900, 1, "3.0"),
        (1199, 1, "3.0"),  # the last price plays for the last gap
        (1200, 1, "1.0"),  # then it loops
        (1800, 1, "2.0"),
        (300, 2, "2.0"),  # twice as fast: 300 real seconds are 600 recorded
        (600, 2, "1.0"),
        (-50, 1, "1.0"),  # before the feed started: the first price
    ],
)
def test_replay_is_time_shifted_to_the_feed_start_and_looped(elapsed_s, speedup, price):
    assert replay_price(SERIES, T0, speedup, T0 + dt.timedelta(seconds=elapsed_s)) == Decimal(price)


def test_replay_reads_the_recorded_history_per_gpu(spot_pool):
    series = replay_series("gcp", "A100-80GB")
    assert series is not None and "a2-ultragpu-1g" in series.key
    assert series.points[0][0] == 0 and all(p > 0 for _, p in series.points)
    assert replay_series("gcp", "No-Such-GPU") is None
    # Per GPU: the 8-GPU H100 instance's spot price is divided by 8.
    h100 = replay_series("gcp", "H100", key=next(k for k in _keys("gcp", "H100") if "a3-highgpu-8g" in k))
    single = replay_series("gcp", "H100", key=next(k for k in _keys("gcp", "H100") if "a3-highgpu-1g" in k))
    assert h100.points[0][1] < 2 * single.points[0][1]


def _keys(name, model):
    from billing_app.public_prices import model_key
    from billing_app.spot_feeds import _read_history, replay_path

    return [key for (m, key) in _read_history(str(replay_path(name))) if m == model_key(model)]


def test_replay_feed_moves_the_pool_price(spot_pool):
    feed = set_spot_feed(spot_pool, actor=None, kind=FeedKind.REPLAY, replay_file="gcp", replay_speedup=3600)
    series = replay_series("gcp", "A100-80GB")
    for minutes in (0, 7, 31):
        now = feed.started_at + dt.timedelta(minutes=minutes)
        advance_spot_feeds(now)
        assert price_in_force(spot_pool, SPOT, now) == replay_price(series, feed.started_at, 3600, now)
    assert "replay feed" in PoolPrice.objects.filter(pool=spot_pool).first().source


GOOD = "effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.25\n2099-01-02T00:00:00Z,1.50\n"


def test_upload_writes_every_row_and_switches_the_pool_to_the_upload_feed(spot_pool, operator):
    created = upload_prices(GOOD, actor=operator, pool=spot_pool)
    assert [r.usd_per_gpu_hour for r in created] == [Decimal("1.25"), Decimal("1.50")]
    assert price_in_force(spot_pool, SPOT, dt.datetime(2099, 1, 1, 12, tzinfo=dt.UTC)) == Decimal("1.25")
    assert SpotFeed.objects.get(pool=spot_pool).kind == FeedKind.UPLOAD
    assert advance_spot_feeds() == {}  # the upkeep leaves an uploaded schedule alone


def test_upload_with_bad_rows_writes_nothing_and_names_each_row(spot_pool, pool, operator):
    text = (
        "pool,effective_from,usd_per_gpu_hour\n"
        "a100-spot,2099-01-01T00:00:00Z,1.25\n"  # good
        "a100-spot,2020-01-01T00:00:00Z,1.25\n"  # past
        "a100-spot,2099-01-03T00:00:00,1.25\n"  # no timezone
        "a100-spot,tomorrow,1.25\n"
        "a100-spot,2099-01-04T00:00:00Z,-3\n"
        "a100-spot,2099-01-05T00:00:00Z,1.5e0.2\n"
        "nowhere,2099-01-06T00:00:00Z,1.00\n"
        "a100,2099-01-07T00:00:00Z,1.00\n"  # on-demand
        "a100-spot,2099-01-01T00:00:00Z,1.30\n"  # twice at one instant
        "a100-spot,2099-01-08T00:00:00Z\n"
    )
    with pytest.raises(PriceUploadError) as error:
        upload_prices(text, actor=operator)
    errors = error.value.errors
    assert [e.split(":")[0] for e in errors] == [f"line {n}" for n in range(3, 12)]
    for fragment in (
        "in the past",
        "no timezone",
        "not an ISO 8601",
        "more than 0",
        "not a number",
        "no pool named 'nowhere'",
        "on-demand",
        "a second price",
        "wrong number of fields",
    ):
        assert any(fragment in e for e in errors), fragment
    assert not PoolPrice.objects.exists()
    assert not SpotFeed.objects.exists()


def test_upload_header_and_permission_errors(spot_pool, member, operator):
    with pytest.raises(PriceUploadError, match="missing column"):
        upload_prices("when,price\n2099-01-01T00:00:00Z,1\n", actor=operator, pool=spot_pool)
    with pytest.raises(PriceUploadError, match="no price rows"):
        upload_prices("effective_from,usd_per_gpu_hour\n", actor=operator, pool=spot_pool)
    with pytest.raises(NotAllowed):
        upload_prices(GOOD, actor=member, pool=spot_pool)
    assert not PoolPrice.objects.exists()


def test_the_embedded_worker_and_celery_beat_advance_the_feeds(spot_pool, on_demand_price, settings):
    from billing_app.tasks import advance_spot_feeds as task
    from scheduler_app.passes.dispatch import EmbeddedWorker

    set_spot_feed(spot_pool, actor=None, kind=FeedKind.OCCUPANCY, min_fraction="0.5", max_fraction="0.5")
    assert EmbeddedWorker(["spot-feeds"]).run_due() == ["spot-feeds"]
    assert price_in_force(spot_pool, SPOT, timezone.now()) == Decimal("2.0000")
    assert settings.CELERY_BEAT_SCHEDULE["spot-feeds"]["task"] == task.name
    assert "unchanged at 2.0000" in task.run()[spot_pool.name]  # the task is the same service
