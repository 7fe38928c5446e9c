"""The ledger equals the sum of the segments to the second, whatever the history: price changes,
billing switches and metering runs at random instants (each run possibly repeated)."""

import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing_app.metering import meter_usage
from billing_app.models import LedgerEntry, PoolPrice
from billing_app.switching import switch_billing_mode
from scheduler_app.choices import BillingMode
from scheduler_app.models import Allocation
from tests.billing_app.conftest import T0, finish

SPAN_S = 6 * 3600
prices = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("50"), places=6)
histories = st.fixed_dictionaries(
    {
        "on_demand": st.lists(st.tuples(st.integers(1, SPAN_S), prices), max_size=5),
        "spot": st.lists(st.tuples(st.integers(1, SPAN_S), prices), max_size=5),
        "switches": st.lists(st.integers(1, SPAN_S - 1), max_size=4, unique=True),
        "runs": st.lists(st.tuples(st.integers(0, SPAN_S + 600), st.booleans()), max_size=8),
        "milli": st.sampled_from([1, 125, 250, 333, 500, 1000]),
        "length": st.integers(1, SPAN_S),
    }
)


def price_at(rows, second):
    """The price in force `second` seconds after T0, read off the history (in the order set) by hand."""
    return [r for r in rows if r[0] <= second][-1][1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories)
def test_ledger_equals_the_segments_to_the_second(pool, spot_pool, make_node, start_running, member, history):
    with transaction.atomic():
        od_rows = [(-3600, Decimal("3.000000")), *sorted(history["on_demand"])]
        spot_rows = [(-3600, Decimal("1.000000")), *sorted(history["spot"])]
        for target, rows in ((pool, od_rows), (spot_pool, spot_rows)):
            for second, usd in rows:
                PoolPrice.objects.create(
                    pool=target, usd_per_gpu_hour=usd, effective_from=T0 + dt.timedelta(seconds=second)
                )
        milli, length = history["milli"], history["length"]
        request = start_running(milli=milli, gpu=make_node(gpus=1).gpus.get())
        events = sorted(
            [(s, "switch") for s in history["switches"] if s < length]
            + [(s, "run", again) for s, again in history["runs"] if s < length]
        )
        for second, kind, *again in events:
            if kind == "switch":
                mode = (
                    BillingMode.SPOT
                    if request.billing_mode == BillingMode.ON_DEMAND
                    else BillingMode.ON_DEMAND
                )
                switch_billing_mode(
                    request,
                    mode,
                    user=member,
                    checkpoint_interval_s=600,
                    now=T0 + dt.timedelta(seconds=second),
                )
            else:
                meter_usage(T0 + dt.timedelta(seconds=second))
                if again[0]:
                    meter_usage(T0 + dt.timedelta(seconds=second))
        finish(request, T0 + dt.timedelta(seconds=length))
        meter_usage(T0 + dt.timedelta(seconds=length + 3600))
        meter_usage(T0 + dt.timedelta(seconds=length + 7200))

        # Expected, second by second, from the segments and the price history.
        expected_seconds, expected_usd = 0, Decimal(0)
        for segment in Allocation.objects.filter(request=request):
            begin = int((segment.started_at - T0).total_seconds())
            end = int((segment.ended_at - T0).total_seconds())
            rows = spot_rows if segment.billing_mode == BillingMode.SPOT else od_rows
            expected_seconds += end - begin
            expected_usd += sum(price_at(rows, s) for s in range(begin, end)) * milli / Decimal(3_600_000)
        entries = LedgerEntry.objects.filter(request=request)
        billed = entries.aggregate(seconds=Sum("seconds"), usd=Sum("amount_usd"))
        assert billed["seconds"] == expected_seconds == length
        # Each entry rounds to 1e-10 USD: the sum is the exact cost within that per entry.
        assert abs(billed["usd"] - expected_usd) <= Decimal("1e-10") * entries.count()
        assert not entries.filter(end__gt=T0 + dt.timedelta(seconds=length)).exists()
        transaction.set_rollback(True)
