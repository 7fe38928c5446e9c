"""API shapes of the price catalog. Money is a decimal string in USD (never a JSON number)."""

from rest_framework import serializers

from billing_app.constants import MAX_USD_PER_GPU_HOUR, PRICE_DECIMAL_PLACES, PRICE_QUANTUM
from portal.api.fields import AwareDateTimeField, StrictCharField, StrictDecimalStringField
from scheduler_app.choices import CapacityType


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
