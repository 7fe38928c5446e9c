"""One price for one slice: what the estimate says an hour costs, what the quote says, what the first
metered hour puts in the ledger and the burn rate the budget page shows agree to the cent, on-demand
and on spot, for eighths to whole cards, with an operator's premium or discount in force."""

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db.models import Sum

from billing_app.constants import CENT
from billing_app.ledger import spend_now
from billing_app.metering import meter_usage
from billing_app.models import LedgerEntry, SharePremium
from billing_app.quotes import quote
from scheduler_app.choices import BillingMode, CapacityType, RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.passes.estimates import estimate_request
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.transitions import transition_requests
from tests.billing_app.conftest import T0, finish

H = dt.timedelta(hours=1)
# Prices with every place used, so a path that drops the premium, the share or a card is off by cents.
PRICES = {CapacityType.ON_DEMAND: "3.456789", CapacityType.SPOT: "1.234567"}
PREMIUMS = {125: "1.1000", 250: "1.2500", 500: "0.9000", 1000: "1.0500"}
SHAPES = [(125, 1), (250, 1), (500, 1), (1000, 1), (1000, 2)]  # (milli per card, cards)


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


@pytest.fixture
def priced(pool, spot_pool, price_history, make_node):
    """Both pools priced from before T0, two cards each, and a premium or discount on every slice size."""
    price_history(pool, (T0 - H, PRICES[CapacityType.ON_DEMAND]))
    price_history(spot_pool, (T0 - H, PRICES[CapacityType.SPOT]))
    for milli, multiplier in PREMIUMS.items():
        SharePremium.objects.create(gpu_milli=milli, multiplier=Decimal(multiplier), effective_from=T0 - H)
    return {
        CapacityType.ON_DEMAND: (pool, make_node(name="od-1", gpus=2, pool=pool)),
        CapacityType.SPOT: (spot_pool, make_node(name="spot-1", gpus=2, pool=spot_pool)),
    }


def run(team, user, node, milli, cards, billing) -> GpuRequest:
    """The slice running from T0: `milli` on each of `cards` cards of `node`."""
    request = GpuRequest.objects.create(
        team=team,
        user=user,
        name="job",
        gpu_milli=milli,
        num_gpus=cards,
        billing_mode=billing,
        checkpoint_interval_s=600 if billing == BillingMode.SPOT else None,
    )
    gpus = node.gpus.order_by("index")[:cards]
    placed = place([PlannedStart(request.pk, tuple(Slice(g.pk, milli, 1024) for g in gpus), billing)], now=T0)
    assert placed.started == [request.pk], placed.refused
    transition_requests([request.pk], RequestState.RUNNING, from_states=[RequestState.SCHEDULED], now=T0)
    return request


@pytest.mark.parametrize("kind", [CapacityType.ON_DEMAND, CapacityType.SPOT])
@pytest.mark.parametrize(("milli", "cards"), SHAPES)
def test_estimate_quote_ledger_and_burn_rate_agree_to_the_cent(team, member, priced, kind, milli, cards):
    # Given a priced pool of each kind with a premium on the slice's size
    pool, node = priced[kind]
    billing = BillingMode.SPOT if kind == CapacityType.SPOT else BillingMode.ON_DEMAND

    # When the slice is estimated and quoted, then runs for an hour and is metered
    estimate = estimate_request(
        user=member,
        team=team,
        pool_name=pool.name,
        now=T0,
        gpu_milli=milli,
        num_gpus=cards,
        billing_mode=billing,
        checkpoint_interval_s=600 if billing == BillingMode.SPOT else None,
    )
    quoted = quote(gpu_model=pool.gpu_model, gpu_milli=milli, num_gpus=cards, at=T0)
    request = run(team, member, node, milli, cards, billing)
    burn = spend_now(team, T0 + H / 2, None).burn_usd_per_hour
    finish(request, T0 + H)
    meter_usage(T0 + 10 * H)
    metered = LedgerEntry.objects.filter(request=request).aggregate(t=Sum("amount_usd"))["t"]

    # Then the four say the same, to the cent
    assert estimate.prices.placed is not None and estimate.prices.placed.pool == pool.name
    on_quote = quoted.spot if kind == CapacityType.SPOT else quoted.on_demand
    expected = cents(Decimal(PRICES[kind]) * Decimal(PREMIUMS[milli]) * milli * cards / 1000)
    assert {
        "estimate": estimate.prices.placed.usd_per_hour,
        "quote": on_quote.usd_per_hour,
        "first metered hour": cents(metered),
        "burn rate": burn,
    } == dict.fromkeys(["estimate", "quote", "first metered hour", "burn rate"], expected)
