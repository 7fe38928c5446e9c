"""API shapes of the price catalog, and of a request's estimate with its prices. Money is a decimal string
in USD (never a JSON number)."""

from decimal import Decimal

from rest_framework import serializers

from billing_app.choices import BudgetPolicy, ResizeState
from billing_app.constants import MAX_USD_PER_GPU_HOUR, PRICE_DECIMAL_PLACES, PRICE_QUANTUM
from billing_app.ledger import parse_month
from billing_app.models import FeedKind
from billing_app.quotes import DEFAULT_RESTART_OVERHEAD_S
from infra.api.fields import (
    AwareDateTimeField,
    StrictCharField,
    StrictChoiceField,
    StrictDecimalStringField,
    StrictIntegerField,
    StrictSlugField,
)
from infra.echo import echoed
from scheduler_app.api.serializers import SubmitSerializer
from scheduler_app.choices import BillingMode, CapacityType, TaskType
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


class RecommendRequestSerializer(serializers.Serializer):
    """A request shape, and what the user must meet: a deadline and/or a budget."""

    team = StrictSlugField(
        required=False, default="", help_text="Team slug; optional when you are in one team."
    )
    task_type = StrictChoiceField(choices=TaskType.choices, default=TaskType.TRAINING)
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
    gpu_model = serializers.CharField(help_text="The GPU model it runs on (its cheapest priced pool).")
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
    gpu_model = serializers.CharField(
        help_text="The GPU model compared; empty when the options span several (each names its own)."
    )
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
    """?month=&user=; `month` comes out as that month's first instant (UTC)."""

    month = serializers.RegexField(
        r"^\d{4}-(0[1-9]|1[0-2])$", required=False, help_text="YYYY-MM; default this month."
    )
    user = serializers.CharField(required=False, help_text="A member's username: that member's statement.")

    def validate(self, data):
        try:
            return data | {"month": parse_month(data.get("month"))}
        except ValueError as problem:
            raise serializers.ValidationError({"month": str(problem)}) from None


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
    policy = StrictChoiceField(choices=BudgetPolicy.choices, required=False, default=BudgetPolicy.ALERT_ONLY)
    grace_s = StrictIntegerField(min_value=0, required=False, default=3600)


class SwitchBillingSerializer(serializers.Serializer):
    billing_mode = StrictChoiceField(choices=BillingMode.choices)
    checkpoint_interval_s = StrictIntegerField(min_value=1, required=False, allow_null=True, default=None)


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
            raise serializers.ValidationError(f"No pool has GPU model {echoed(value)!r}.")
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
    kind = StrictChoiceField(choices=FeedKind.choices)
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


class EstimateRequestSerializer(SubmitSerializer):
    """A submit's fields for an estimate; the name may be left out (it does not change where work runs)."""

    name = StrictCharField(required=False, allow_blank=True, max_length=100)


class EstimateSerializer(serializers.Serializer):
    """What the next scheduling pass would do with the request, judged on the cluster as of `as_of`."""

    starts_now = serializers.BooleanField()
    where = serializers.CharField(help_text="node/gpuN, ... when it would start now.")
    estimated_start_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="Why it would wait, as the pass would store it.")
    pool = serializers.CharField(
        help_text="The pool it would start in, now or at its reservation; empty if unknown."
    )
    as_of = serializers.DateTimeField(help_text="The time (UTC) of the cluster state the estimate used.")
    summary = serializers.CharField(help_text="The estimate in one sentence, as the request form shows it.")
    budget_warning = serializers.CharField(
        help_text="Set when the request could exceed what is left of the team's (or your) budget this month "
        "over its max duration; empty otherwise."
    )
    price = HourlyPriceSerializer(
        source="prices.placed",
        allow_null=True,
        help_text="USD per hour in `pool`; null if unknown or unpriced.",
    )
    prices = HourlyPricesSerializer(
        source="prices.compared",
        help_text="On-demand against spot on the GPU model of `pool` (or the only model allowed).",
    )
    prices_by_model = HourlyPricesSerializer(
        source="prices.by_model", many=True, help_text="On-demand against spot for each GPU model allowed."
    )
    price_lines = serializers.ListField(
        child=serializers.CharField(), help_text="The prices in words, one line each, as the form shows them."
    )
    quote = QuoteSerializer(
        allow_null=True,
        help_text="On-demand against spot on the compared model: totals over the max duration and the "
        "effective spot cost with expected reclaims; null when no model is known.",
    )
