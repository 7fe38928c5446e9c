"""API shapes of the price catalog. Money is a decimal string in USD (never a JSON number)."""

from decimal import Decimal

from rest_framework import serializers

from billing_app.choices import BudgetPolicy, ResizeState
from billing_app.constants import MAX_USD_PER_GPU_HOUR, PRICE_DECIMAL_PLACES, PRICE_QUANTUM
from portal.api.fields import (
    AwareDateTimeField,
    StrictCharField,
    StrictDecimalStringField,
    StrictIntegerField,
    StrictSlugField,
)
from scheduler_app.choices import BillingMode, CapacityType, TaskType
from scheduler_app.constants import MAX_GPUS_PER_REQUEST, MILLI_PER_GPU


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


class RecommendRequestSerializer(serializers.Serializer):
    """A request shape, and what the user must meet: a deadline and/or a budget."""

    team = StrictSlugField(
        required=False, default="", help_text="Team slug; optional when you are in one team."
    )
    task_type = serializers.ChoiceField(choices=TaskType.choices, default=TaskType.TRAINING)
    gpu_milli = StrictIntegerField(min_value=1, max_value=MILLI_PER_GPU, default=MILLI_PER_GPU)
    num_gpus = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_REQUEST, default=1)
    gpu_model = StrictCharField(max_length=64, required=False, allow_blank=True, default="")
    pool = StrictSlugField(required=False, allow_blank=True, default="")
    command = StrictCharField(required=False, allow_blank=True, default="", max_length=10_000)
    name = StrictCharField(required=False, allow_blank=True, default="", max_length=100)
    workload_key = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="Whose finished runs the model learns from (as set on submit); default: the command.",
    )
    max_duration_s = StrictIntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True)
    deadline_s = StrictIntegerField(
        min_value=1,
        max_value=2**31 - 1,
        required=False,
        allow_null=True,
        help_text="Finish within (seconds).",
    )
    budget_usd = StrictDecimalStringField(
        max_digits=14, decimal_places=2, min_value=Decimal("0.01"), required=False, allow_null=True
    )


class PredictionSerializer(serializers.Serializer):
    share = serializers.FloatField(help_text="Cards: 0.125 .. 1, or whole cards.")
    runtime_s = serializers.FloatField()
    low_s = serializers.FloatField()
    high_s = serializers.FloatField()


class OptionSerializer(serializers.Serializer):
    gpu_milli = serializers.IntegerField()
    num_gpus = serializers.IntegerField()
    capacity_type = serializers.ChoiceField(choices=CapacityType.choices)
    runtime_s = serializers.FloatField(help_text="Predicted runtime.")
    runtime_high_s = serializers.FloatField(help_text="The slow end of its band.")
    runtime_low_s = serializers.FloatField(help_text="The fast end of its band.")
    cost_usd = serializers.DecimalField(
        max_digits=14, decimal_places=2, help_text="Predicted cost, a string."
    )
    cost_high_usd = serializers.DecimalField(max_digits=14, decimal_places=2)
    pareto = serializers.BooleanField(help_text="No other option is both faster and cheaper.")


class CurveSerializer(serializers.Serializer):
    t1_s = serializers.FloatField(help_text="Runtime on one whole card.")
    a = serializers.FloatField(help_text="Part of the time no share changes.")
    s = serializers.FloatField(help_text="Share at which the GPU part saturates.")
    source = serializers.CharField(help_text="history, utilization or prior.")
    band = serializers.FloatField(help_text="Relative half-width of the band at observed shares.")


class RecommendationSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    curve = CurveSerializer()
    predictions = PredictionSerializer(many=True, source="shares")
    options = OptionSerializer(many=True)
    chosen = OptionSerializer(allow_null=True)
    reason = serializers.CharField()
    fastest = OptionSerializer(allow_null=True)
    cheapest = OptionSerializer(allow_null=True)


class ResizeOfferSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    request = serializers.IntegerField(source="request_id")
    from_milli = serializers.IntegerField()
    to_milli = serializers.IntegerField()
    busy_percent = serializers.IntegerField(help_text="How busy the job kept its share (last hour).")
    slowdown_percent = serializers.IntegerField(help_text="Predicted runtime change; negative: faster.")
    saving_percent = serializers.IntegerField(help_text="Predicted cost change for the same work; + cheaper.")
    reason = serializers.CharField()
    state = serializers.ChoiceField(choices=ResizeState.choices)
    offered_at = serializers.DateTimeField()
    accepted_at = serializers.DateTimeField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)


def _usd(**kwargs):
    return serializers.DecimalField(max_digits=20, decimal_places=2, **kwargs)


class ByUserSerializer(serializers.Serializer):
    user = serializers.CharField()
    usd = _usd()


class ByPoolSerializer(serializers.Serializer):
    pool = serializers.CharField()
    usd = _usd()


class ByBillingModeSerializer(serializers.Serializer):
    billing_mode = serializers.CharField()
    usd = _usd()


class BudgetDaySerializer(serializers.Serializer):
    day = serializers.DateField()
    spend_usd = _usd(help_text="Spent from the month's start to the end of this day.")
    left_usd = _usd(allow_null=True, help_text="What is left of the budget then; null without a budget.")


class StatementSerializer(serializers.Serializer):
    """A team's (or one member's) month, USD as decimal strings rounded to cents."""

    team = serializers.CharField()
    month = serializers.CharField(help_text="YYYY-MM (UTC).")
    user = serializers.CharField(help_text="The member's username; empty for the whole team.")
    total_usd = _usd()
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=3)
    by_user = ByUserSerializer(many=True)
    by_pool = ByPoolSerializer(many=True)
    by_billing_mode = ByBillingModeSerializer(many=True)


class StatementQuerySerializer(serializers.Serializer):
    month = serializers.RegexField(
        r"^\d{4}-(0[1-9]|1[0-2])$", required=False, help_text="YYYY-MM; default this month."
    )
    user = serializers.CharField(required=False, help_text="A member's username: that member's statement.")


class BudgetViewSerializer(serializers.Serializer):
    team = serializers.CharField()
    month = serializers.CharField()
    monthly_usd = _usd(allow_null=True)
    policy = serializers.CharField()
    thresholds_percent = serializers.ListField(child=serializers.IntegerField())
    spend_usd = _usd()
    burn_usd_per_hour = _usd()
    forecast_usd = _usd(help_text="Spend so far plus the current burn rate until the month ends.")
    percent_used = serializers.DecimalField(max_digits=8, decimal_places=1, allow_null=True)
    days = BudgetDaySerializer(many=True)
    statement = StatementSerializer()


class SetBudgetSerializer(serializers.Serializer):
    monthly_usd = StrictDecimalStringField(
        max_digits=12, decimal_places=2, help_text='USD a month, e.g. "500.00".'
    )
    user = StrictCharField(required=False, help_text="A member's username: that member's own budget.")
    thresholds_percent = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=1000), required=False, default=[50, 80, 100]
    )
    policy = serializers.ChoiceField(
        choices=BudgetPolicy.choices, required=False, default=BudgetPolicy.ALERT_ONLY
    )
    grace_s = StrictIntegerField(min_value=0, required=False, default=3600)


class SwitchBillingSerializer(serializers.Serializer):
    billing_mode = serializers.ChoiceField(choices=BillingMode.choices)
    checkpoint_interval_s = StrictIntegerField(min_value=1, required=False, allow_null=True, default=None)
