"""Forms of the billing pages: budgets, a request's billing mode, quotes, price files, spot feeds and pool
prices."""

from decimal import Decimal

from django import forms

from billing_app.choices import BudgetPolicy
from billing_app.models import FeedKind
from billing_app.spot_feeds import REPLAY_FILES
from infra.forms import ServiceErrorsMixin, UtcDateTimeField
from scheduler_app.choices import BillingMode
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.shares import Share
from scheduler_app.models import Pool


class BillingSwitchForm(ServiceErrorsMixin, forms.Form):
    """Switch a running request's billing from its page; the checkpoint interval in minutes, as the
    request form asks for it (the service takes seconds)."""

    service_fields = {"checkpoint_interval_s": "checkpoint_interval_min"}

    billing_mode = forms.ChoiceField(choices=BillingMode.choices)
    checkpoint_interval_min = forms.IntegerField(
        required=False, min_value=1, label="Checkpoint every (minutes)"
    )

    def service_kwargs(self) -> dict:
        minutes = self.cleaned_data["checkpoint_interval_min"]
        return {
            "mode": self.cleaned_data["billing_mode"],
            "checkpoint_interval_s": None if minutes is None else minutes * 60,
        }


class BudgetForm(ServiceErrorsMixin, forms.Form):
    """A team's monthly budget, its alert thresholds and its 100 % policy."""

    service_fields = {"thresholds_percent": "thresholds"}

    monthly_usd = forms.DecimalField(
        min_value=Decimal("0.01"), max_digits=12, decimal_places=2, label="USD a month"
    )
    thresholds = forms.CharField(
        initial="50, 80, 100", label="Alert at (%)", help_text="Whole percentages, comma-separated."
    )
    policy = forms.ChoiceField(choices=BudgetPolicy.choices, label="At 100 %")
    grace_s = forms.IntegerField(
        min_value=0,
        initial=3600,
        label="Grace period (s)",
        help_text="Before running work stops, with that policy.",
    )

    def clean_thresholds(self):
        parts = [p.strip().rstrip("%") for p in self.cleaned_data["thresholds"].split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            raise forms.ValidationError("Give whole percentages separated by commas, such as 50, 80, 100.")
        return [int(p) for p in parts]

    def clean(self):
        cleaned = super().clean()
        if "thresholds" in cleaned:
            cleaned["thresholds_percent"] = cleaned.pop("thresholds")
        return cleaned


class QuoteForm(forms.Form):
    """A request shape to compare on-demand against spot on one GPU model (the pricing page)."""

    gpu_model = forms.ChoiceField(label="GPU model")
    share = forms.TypedChoiceField(choices=Share.choices, coerce=int, initial=MILLI_PER_GPU, label="Share")
    max_duration_h = forms.DecimalField(
        min_value=Decimal("0.01"),
        max_value=Decimal(24 * 365),
        decimal_places=2,
        initial=Decimal(8),
        label="Max duration (h)",
    )
    checkpoint_interval_min = forms.IntegerField(
        min_value=1,
        max_value=24 * 60,
        required=False,
        initial=30,
        label="Checkpoint every (min)",
        help_text="Empty: the job does not checkpoint, so a reclaim loses everything so far.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        models = Pool.objects.order_by("gpu_model").values_list("gpu_model", flat=True).distinct()
        self.fields["gpu_model"].choices = [(m, m) for m in models]

    def shape(self) -> dict:
        share = Share.parse(self.cleaned_data["share"])
        interval = self.cleaned_data.get("checkpoint_interval_min")
        return {
            "gpu_model": self.cleaned_data["gpu_model"],
            "gpu_milli": share.gpu_milli,
            "num_gpus": share.num_gpus,
            "max_duration_s": int(self.cleaned_data["max_duration_h"] * 3600),
            "checkpoint_interval_s": interval * 60 if interval else None,
        }


class PriceUploadForm(forms.Form):
    """Operators upload a spot price file: effective_from,usd_per_gpu_hour[,pool]."""

    pool = forms.ModelChoiceField(
        queryset=Pool.objects.filter(capacity_type="spot"),
        required=False,
        help_text="Empty: the file names the pool on each row (a pool column).",
    )
    file = forms.FileField(help_text="CSV, UTF-8: effective_from (ISO 8601 with timezone), usd_per_gpu_hour.")


class SpotFeedForm(ServiceErrorsMixin, forms.Form):
    """Operators choose what drives a spot pool's price; set_spot_feed checks the values."""

    service_fields = {"replay_series": "replay_file"}

    pool = forms.ModelChoiceField(queryset=Pool.objects.filter(capacity_type="spot"))
    kind = forms.ChoiceField(choices=FeedKind.choices)
    min_fraction = forms.DecimalField(initial=Decimal("0.30"), label="Idle price / on-demand")
    max_fraction = forms.DecimalField(initial=Decimal("0.90"), label="Full price / on-demand")
    replay_file = forms.ChoiceField(choices=[(f, f) for f in REPLAY_FILES], initial="gcp")
    replay_speedup = forms.IntegerField(min_value=1, initial=1, label="Replay speed (x)")


class PoolPriceForm(ServiceErrorsMixin, forms.Form):
    """Operators price a pool per whole GPU-hour in USD; set_pool_price checks the value and audits it."""

    pool = forms.ModelChoiceField(queryset=Pool.objects.all())
    usd_per_gpu_hour = forms.DecimalField(
        label="USD per GPU-hour", help_text="One whole card for an hour; at most 6 decimal places."
    )
    effective_from = UtcDateTimeField(
        required=False, label="Starts (UTC)", help_text="Empty: now. Never in the past."
    )
    source = forms.CharField(
        max_length=500, required=False, help_text="Where the number comes from; empty: “set by you”."
    )
