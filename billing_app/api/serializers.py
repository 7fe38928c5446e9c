"""API shapes of the price catalog. Money is a decimal string in USD (never a JSON number)."""

from decimal import Decimal

from rest_framework import serializers

from billing_app.constants import MAX_USD_PER_GPU_HOUR, PRICE_DECIMAL_PLACES, PRICE_QUANTUM
from billing_app.models import FeedKind
from billing_app.quotes import DEFAULT_RESTART_OVERHEAD_S
from portal.api.fields import (
    AwareDateTimeField,
    StrictCharField,
    StrictDecimalStringField,
    StrictIntegerField,
)
from scheduler_app.choices import CapacityType
from scheduler_app.constants import MAX_GPUS_PER_REQUEST, MILLI_PER_GPU
from scheduler_app.models import Pool


class PoolPriceSerializer(serializers.Serializer):
    pool = serializers.CharField(source="pool.name")
    gpu_model = serializers.CharField(source="pool.gpu_model")
    capacity_type = serializers.ChoiceField(source="pool.capacity_type", choices=CapacityType.choices)
    usd_per_gpu_hour = serializers.DecimalField(
        max_digits=10,
        decimal_places=PRICE_DECIMAL_PLACES,
        help_text="USD per whole GPU and hour, as a decimal string.",
    )
    effective_from = serializers.DateTimeField(help_text="From when this price applies (UTC).")
    source = serializers.CharField(help_text="Where the number comes from.")


class SetPoolPriceSerializer(serializers.Serializer):
    usd_per_gpu_hour = StrictDecimalStringField(
        max_digits=10,
        decimal_places=PRICE_DECIMAL_PLACES,
        min_value=PRICE_QUANTUM,
        max_value=MAX_USD_PER_GPU_HOUR,
        help_text='USD per whole GPU and hour as a JSON string, e.g. "2.50" (a JSON number is refused: '
        "it may not hold the cents exactly); more than 0, at most 6 decimal places.",
    )
    effective_from = AwareDateTimeField(
        required=False,
        help_text="When the price starts (with timezone); now when left out, never in the past.",
    )
    source = StrictCharField(
        required=False, allow_blank=True, max_length=500, help_text="Where the number comes from."
    )


class HourlyPriceSerializer(serializers.Serializer):
    usd_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=2, help_text="USD per hour for the whole request, rounded to cents."
    )
    pool = serializers.CharField(help_text="The pool this price is for.")
    gpu_model = serializers.CharField(help_text="The GPU model of that pool.")


class HourlyPricesSerializer(serializers.Serializer):
    """What the request would cost per hour on-demand and on spot on one GPU model, in the cheapest
    priced pool of each kind with that model; null where no such pool is priced."""

    gpu_model = serializers.CharField(help_text="The GPU model compared (empty when none is known).")
    on_demand = HourlyPriceSerializer(allow_null=True)
    spot = HourlyPriceSerializer(allow_null=True)
    spot_saving_percent = serializers.IntegerField(
        allow_null=True,
        help_text="How much less spot costs than on-demand on this model, in whole percent; null unless "
        "both are priced.",
    )


MONEY = {"max_digits": 14, "decimal_places": 2}
HOURS = {"max_digits": 14, "decimal_places": 4}


class QuoteQuerySerializer(serializers.Serializer):
    """A request shape to quote (query parameters)."""

    gpu_model = serializers.CharField(max_length=64, help_text="The GPU model both sides run on.")
    gpu_milli = serializers.IntegerField(min_value=1, max_value=MILLI_PER_GPU, help_text="Share per card.")
    num_gpus = serializers.IntegerField(min_value=1, max_value=MAX_GPUS_PER_REQUEST, default=1)
    max_duration_s = serializers.IntegerField(min_value=1, required=False, help_text="For the totals.")
    checkpoint_interval_s = serializers.IntegerField(
        min_value=1, required=False, help_text="How often the job checkpoints; none: a reclaim loses it all."
    )
    restart_overhead_s = serializers.IntegerField(
        min_value=0, max_value=86_400, default=DEFAULT_RESTART_OVERHEAD_S
    )

    def validate_gpu_model(self, value):
        if not Pool.objects.filter(gpu_model=value).exists():
            raise serializers.ValidationError(f"No pool has GPU model {value!r}.")
        return value


class QuoteSideSerializer(serializers.Serializer):
    pool = serializers.CharField(help_text="The cheapest priced pool of this capacity type and model.")
    usd_per_gpu_hour = serializers.DecimalField(max_digits=10, decimal_places=PRICE_DECIMAL_PLACES)
    usd_per_hour = serializers.DecimalField(**MONEY, help_text="The whole request, per hour.")
    expected_total_usd = serializers.DecimalField(
        **MONEY, allow_null=True, help_text="Over the max duration; null without one."
    )


class ReclaimRateSerializer(serializers.Serializer):
    per_hour = serializers.DecimalField(
        max_digits=10, decimal_places=4, help_text="Expected reclaims per hour."
    )
    reclaims = serializers.IntegerField(help_text="Reclaims in the pool's last 30 days.")
    hours_observed = serializers.DecimalField(**HOURS, help_text="Hours requests ran on the pool then.")
    source = serializers.CharField(help_text="'prior' (no history) or 'history + prior'.")


class SpotCostSerializer(serializers.Serializer):
    reclaim = ReclaimRateSerializer()
    loss_per_reclaim_hours = serializers.DecimalField(**HOURS, help_text="Work lost + restart, per reclaim.")
    expected_reclaims = serializers.DecimalField(**MONEY, allow_null=True)
    expected_hours = serializers.DecimalField(**HOURS, allow_null=True, help_text="Paid spot hours.")
    effective_total_usd = serializers.DecimalField(**MONEY, allow_null=True)
    effective_usd_per_hour = serializers.DecimalField(
        **MONEY, allow_null=True, help_text="Per hour of useful work, reclaims counted."
    )
    note = serializers.CharField()


class QuoteSerializer(serializers.Serializer):
    """On-demand against spot for one shape on one GPU model; money as decimal strings (USD)."""

    gpu_model = serializers.CharField()
    gpu_milli = serializers.IntegerField()
    num_gpus = serializers.IntegerField()
    hours = serializers.DecimalField(**HOURS, allow_null=True, help_text="The max duration in hours.")
    on_demand = QuoteSideSerializer(allow_null=True)
    spot = QuoteSideSerializer(allow_null=True)
    spot_cost = SpotCostSerializer(allow_null=True)
    cheaper = serializers.CharField(help_text="on-demand, spot, or empty when it cannot be told.")


class PriceHistoryQuerySerializer(serializers.Serializer):
    hours = serializers.IntegerField(min_value=1, max_value=24 * 90, default=24, help_text="How far back.")


class PriceHistorySerializer(serializers.Serializer):
    """A pool's price history over the window: the price in force at its start, then every change."""

    pool = serializers.CharField()
    gpu_model = serializers.CharField()
    capacity_type = serializers.CharField()
    feed = serializers.CharField(
        help_text="What drives it: occupancy, replay, upload, or empty (set by hand)."
    )
    points = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text='[[ISO time, "USD per GPU-hour"], ...] in time order.',
    )


class PriceUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="CSV: effective_from,usd_per_gpu_hour[,pool] (UTF-8).")
    pool = serializers.CharField(required=False, help_text="The spot pool, when the file has no pool column.")


class SharePremiumSerializer(serializers.Serializer):
    gpu_milli = serializers.IntegerField(help_text="The slice size it applies to, in milli-GPU.")
    multiplier = serializers.DecimalField(
        max_digits=6, decimal_places=4, help_text="1.1000 is a 10 % premium, 0.9000 a 10 % discount."
    )
    effective_from = serializers.DateTimeField()


class SetSharePremiumSerializer(serializers.Serializer):
    gpu_milli = StrictIntegerField(min_value=1, max_value=MILLI_PER_GPU)
    multiplier = StrictDecimalStringField(
        max_digits=6,
        decimal_places=4,
        min_value=Decimal("0.0001"),
        max_value=Decimal(10),
        help_text='As a JSON string, e.g. "1.10"; 1 removes the premium.',
    )
    effective_from = AwareDateTimeField(required=False, help_text="Now when left out; never in the past.")


class SpotFeedSerializer(serializers.Serializer):
    pool = serializers.CharField(source="pool.name", read_only=True)
    kind = serializers.ChoiceField(choices=FeedKind.choices)
    min_fraction = StrictDecimalStringField(
        max_digits=5, decimal_places=4, required=False, help_text="Idle price / on-demand (occupancy)."
    )
    max_fraction = StrictDecimalStringField(
        max_digits=5, decimal_places=4, required=False, help_text="Full price / on-demand (occupancy)."
    )
    replay_file = serializers.CharField(required=False, help_text="gcp, azure or aws (replay).")
    replay_series = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="cloud/region/zone/instance; blank: the one that moves most.",
    )
    replay_speedup = StrictIntegerField(required=False, min_value=1, help_text="Recorded seconds per second.")
    note = serializers.CharField(read_only=True)
