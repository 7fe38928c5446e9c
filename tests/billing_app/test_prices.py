"""The price catalog: public medians from the CSV, the price in force over time, setting a price,
and what a request costs per hour."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import Event
from billing_app.models import PoolPrice
from billing_app.public_prices import read_public_prices
from billing_app.selectors import price_in_force, price_per_hour, prices_in_force
from billing_app.services import set_pool_price
from scheduler_app.choices import CapacityType
from scheduler_app.models import GpuRequest
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.placement import Slice, allocate
from teams.permissions import NotAllowed

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def at(days: float) -> dt.datetime:
    return T0 + dt.timedelta(days=days)


# Medians from the public price file


def test_medians_are_exact_decimals_per_model_and_capacity_type(price_file):
    path = price_file(
        [
            ("A100-80GB", "0.1", "0.3"),
            ("A100-80GB", "0.2", ""),  # no spot price published: only the on-demand one counts
            ("A100-80GB", "", "0.7"),
            ("A100-80GB", "", "0.5"),
            ("H100", "1.000001", ""),
            ("H100", "1.000002", ""),
            ("", "9.9", "9.9"),  # no GPU model: skipped
            ("L4", "", ""),  # no price at all: skipped
        ]
    )

    public = read_public_prices(path)

    assert (public.rows_read, public.rows_skipped) == (8, 2)
    on_demand = public.median_for("A100-80GB", "on-demand")
    assert (on_demand.usd_per_gpu_hour, on_demand.count) == (
        Decimal("0.150000"),
        2,
    )  # a float gives 0.15000000000000002
    spot = public.median_for("A100-80GB", "spot")
    assert (spot.usd_per_gpu_hour, spot.count) == (Decimal("0.500000"), 3)
    # 1.0000015 rounds half-up to the catalog's 6 places
    assert public.median_for("H100", "on-demand").usd_per_gpu_hour == Decimal("1.000002")
    assert public.median_for("H100", "spot") is None
    assert public.median_for("L4", "on-demand") is None


def test_gpu_model_names_match_whatever_their_case_and_separators(price_file):
    public = read_public_prices(price_file([("RTX4090", "0.40", "")]))

    assert public.median_for("RTX-4090", "on-demand").usd_per_gpu_hour == Decimal("0.400000")
    assert public.median_for("rtx 4090", "on-demand").gpu_model == "RTX4090"
    assert public.median_for("RTX-4080", "on-demand") is None


def test_import_prices_prices_each_pool_from_the_median_of_its_model_and_capacity(
    price_file, pool, spot_pool, capsys
):
    rtx = create_pool(name="rtx", gpu_model="RTX-3080", capacity_type=CapacityType.ON_DEMAND)
    path = price_file([("A100-80GB", "4.0", "1.0"), ("A100-80GB", "5.0", "2.0"), ("A100-80GB", "7.0", "")])

    call_command("import_prices", str(path))

    assert price_in_force(pool).usd_per_gpu_hour == Decimal("5.000000")
    assert price_in_force(spot_pool).usd_per_gpu_hour == Decimal("1.500000")
    assert price_in_force(rtx) is None  # the file has no RTX-3080: no price is made up
    assert price_in_force(pool).source == f"median of 3 public on-demand prices for A100-80GB in {path}"
    out = capsys.readouterr().out
    assert "Read 3 rows" in out and "rtx: not changed (no public on-demand price for RTX-3080)" in out


def test_import_prices_again_with_the_same_file_writes_nothing_new(price_file, pool):
    path = price_file([("A100-80GB", "4.0", "1.0")])
    call_command("import_prices", str(path))
    rows, events = PoolPrice.objects.count(), Event.objects.count()

    call_command("import_prices", str(path))

    assert (PoolPrice.objects.count(), Event.objects.count()) == (rows, events)


def test_a_missing_price_file_is_a_clear_error_and_writes_nothing(tmp_path, pool):
    events = Event.objects.count()

    with pytest.raises(CommandError, match=r"No price file at .*nowhere\.csv.*Nothing was written"):
        call_command("import_prices", str(tmp_path / "nowhere.csv"))

    assert (PoolPrice.objects.count(), Event.objects.count()) == (0, events)


@pytest.mark.parametrize(
    ("rows", "header", "says"),
    [
        (
            [("A100-80GB", "4.0", ""), ("A100-80GB", "four", "")],
            None,
            r"line 3: ondemand_usd_per_gpu_hour 'four'",
        ),
        ([("A100-80GB", "4.0", ""), ("A100-80GB", "-1", "")], None, r"line 3: .*not a positive price"),
        (
            [("A100-80GB", "4.0", "")],
            "cloud,gpu_model,ondemand_usd_per_gpu_hour",
            r"missing column.*spot_usd",
        ),
    ],
)
def test_a_malformed_price_file_is_a_clear_error_and_writes_nothing(price_file, pool, rows, header, says):
    path = price_file(rows, header=header) if header else price_file(rows)

    with pytest.raises(CommandError, match=says):
        call_command("import_prices", str(path))

    assert not PoolPrice.objects.exists()


def test_a_file_that_is_not_text_is_a_clear_error(tmp_path, pool):
    path = tmp_path / "prices.csv"
    path.write_bytes(b"\xff\xfe\x00binary")

    with pytest.raises(CommandError, match="not UTF-8"):
        call_command("import_prices", str(path))

    assert not PoolPrice.objects.exists()


# The price in force over time


def test_the_price_in_force_is_the_latest_that_has_started(pool, operator):
    with time_machine.travel(T0, tick=False):
        set_pool_price(pool, "2.00", actor=operator)
        set_pool_price(pool, "3.00", actor=operator, effective_from=at(31))
        set_pool_price(pool, "4.00", actor=operator, effective_from=at(59))

    def in_force(when):
        price = price_in_force(pool, at=when)
        return price and price.usd_per_gpu_hour

    assert in_force(at(-1)) is None
    assert in_force(at(0)) == Decimal("2.00")
    assert in_force(at(30.9)) == Decimal("2.00")
    assert in_force(at(31)) == Decimal("3.00")  # from its effective_from on, inclusive
    assert in_force(at(58)) == Decimal("3.00")
    assert in_force(at(100)) == Decimal("4.00")
    assert PoolPrice.objects.filter(pool=pool).count() == 3  # the history stays


def test_prices_in_force_lists_one_price_per_priced_pool(pool, spot_pool, operator):
    create_pool(name="unpriced", gpu_model="L4", capacity_type=CapacityType.ON_DEMAND)
    with time_machine.travel(T0, tick=False):
        set_pool_price(pool, "2.00", actor=operator)
        set_pool_price(pool, "2.50", actor=operator)  # same moment: the one set last wins
        set_pool_price(spot_pool, "1.00", actor=operator, effective_from=at(10))

    assert [(p.pool.name, p.usd_per_gpu_hour) for p in prices_in_force(at(1))] == [("a100", Decimal("2.5"))]
    assert [(p.pool.name, p.usd_per_gpu_hour) for p in prices_in_force(at(10))] == [
        ("a100", Decimal("2.5")),
        ("a100-spot", Decimal("1.0")),
    ]


# Setting a price


def test_setting_a_price_is_audited_on_the_pool(pool, operator):
    set_pool_price(pool, "2.5", actor=operator, source="contract 2025")
    set_pool_price(pool, Decimal("2.75"), actor=operator)

    first, second = Event.objects.filter(content_type__model="pool", object_id=pool.pk).order_by("id")
    assert (first.to_state, first.actor_label) == ("priced", "ops")
    assert first.data["usd_per_gpu_hour"] == {"from": None, "to": "2.500000"}
    assert "source: contract 2025" in first.reason
    assert second.data["usd_per_gpu_hour"] == {"from": "2.500000", "to": "2.750000"}
    assert price_in_force(pool).source == "set by ops"
    assert price_in_force(pool).created_by == operator


@pytest.mark.parametrize("user", ["team_admin", "member", "outsider"])
def test_only_operators_set_prices(pool, user, request):
    with pytest.raises(NotAllowed):
        set_pool_price(pool, "2.50", actor=request.getfixturevalue(user))

    assert not PoolPrice.objects.exists()


@pytest.mark.parametrize(
    "value", ["0", "-1", "abc", "NaN", "Infinity", "10000", "1.0000001", 2.5, True, None, Decimal("0")]
)
def test_a_bad_price_is_refused_naming_the_field(pool, operator, value):
    with pytest.raises(ValidationError) as refused:
        set_pool_price(pool, value, actor=operator)

    assert list(refused.value.message_dict) == ["usd_per_gpu_hour"]
    assert not PoolPrice.objects.exists()


def test_a_price_cannot_start_in_the_past_or_without_a_timezone(pool, operator):
    with time_machine.travel(T0, tick=False):
        for when in (at(-0.001), dt.datetime(2025, 6, 1)):
            with pytest.raises(ValidationError) as refused:
                set_pool_price(pool, "2.50", actor=operator, effective_from=when)
            assert list(refused.value.message_dict) == ["effective_from"]

    assert not PoolPrice.objects.exists()


def test_a_system_part_recording_a_past_may_backdate_a_price_only_on_a_pool_nothing_used(
    pool, make_node, team, member
):
    # given an unused pool: the demo seed prices the week of history it records
    week_ago = timezone.now() - dt.timedelta(days=7)
    price = set_pool_price(pool, "2.50", actor=None, effective_from=week_ago, backdated=True)
    assert price_in_force(pool, at=week_ago + dt.timedelta(seconds=1)) == price

    # once something ran there, a backdated price would change what it cost
    node = make_node(gpus=1)
    request = GpuRequest.objects.create(team=team, user=member, name="job", gpu_milli=500)
    allocate(request, [Slice(node.gpus.get().pk, 500, 40960)])
    with pytest.raises(ValidationError) as refused:
        set_pool_price(pool, "3.00", actor=None, effective_from=week_ago, backdated=True)
    assert list(refused.value.message_dict) == ["effective_from"]


def test_an_operator_never_backdates_a_price(pool, operator):
    with pytest.raises(ValidationError):
        set_pool_price(
            pool, "2.50", actor=operator, effective_from=timezone.now() - dt.timedelta(days=1), backdated=True
        )

    assert not PoolPrice.objects.exists()


# What a request costs per hour


def test_price_per_hour_is_the_share_of_the_card_price_rounded_half_up_to_cents(pool, operator):
    set_pool_price(pool, "1.00", actor=operator)

    def usd(milli, count):
        return price_per_hour(milli, count, placed_pool="a100").placed.usd_per_hour

    assert usd(125, 1) == Decimal("0.13")  # 0.125: half-up, not to even
    assert usd(1000, 8) == Decimal("8.00")
    set_pool_price(pool, "0.04", actor=operator)
    assert usd(125, 1) == Decimal("0.01")  # 0.005
    assert usd(100, 1) == Decimal("0.00")  # 0.004


def test_price_per_hour_compares_on_demand_and_spot_per_gpu_model(pool, spot_pool, operator):
    cheaper = create_pool(name="a100-b", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    h100_spot = create_pool(name="h100-spot", gpu_model="H100", capacity_type=CapacityType.SPOT)
    create_pool(name="l4", gpu_model="L4", capacity_type=CapacityType.ON_DEMAND)  # unpriced: ignored
    for target, price in ((pool, "4.00"), (cheaper, "3.00"), (spot_pool, "1.50"), (h100_spot, "1.00")):
        set_pool_price(target, price, actor=operator)

    anywhere = price_per_hour(500, 1)
    a100, h100 = anywhere.by_model
    assert (a100.gpu_model, a100.on_demand.pool, a100.on_demand.usd_per_hour) == (
        "A100-80GB",
        "a100-b",
        Decimal("1.50"),
    )
    assert (a100.spot.pool, a100.spot.usd_per_hour) == ("a100-spot", Decimal("0.75"))
    assert a100.spot_saving_percent == 50
    assert (h100.gpu_model, h100.on_demand, h100.spot.usd_per_hour) == ("H100", None, Decimal("0.50"))
    assert anywhere.placed is None and anywhere.compared.on_demand is None  # no placement, several models

    placed = price_per_hour(500, 1, placed_pool="a100")
    assert (placed.placed.pool, placed.placed.usd_per_hour) == ("a100", Decimal("2.00"))  # not the cheapest
    assert placed.compared == a100

    in_pool = price_per_hour(1000, 2, pool=pool)
    (only,) = in_pool.by_model
    assert (only.on_demand.pool, only.on_demand.usd_per_hour, only.spot) == ("a100", Decimal("8.00"), None)

    assert price_per_hour(500, 1, gpu_model="L4").by_model == ()
