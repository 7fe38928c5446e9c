"""The price catalog: what one whole card of a pool costs per hour, in USD, over time.

Money is Decimal with the currency in the name (USD); times are aware UTC.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from billing_app.choices import OPEN_RESIZE_STATES, BudgetPolicy, ResizeState
from billing_app.constants import MAX_USD_PER_GPU_HOUR, PRICE_DECIMAL_PLACES


class PoolPriceQuerySet(models.QuerySet):
    def in_force(self, at):
        """Per pool, the price in force at `at`: the latest effective_from ≤ at (ties: the latest set)."""
        latest = (
            PoolPrice.objects.filter(pool=OuterRef("pool"), effective_from__lte=at)
            .order_by("-effective_from", "-id")
            .values("id")[:1]
        )
        return self.filter(effective_from__lte=at, id=Subquery(latest))


class PoolPrice(models.Model):
    """A pool's price in USD per whole GPU-hour from effective_from (aware UTC) on; rows are never changed.

    A new price is a new row, so the history stays and each usage segment can be
    billed at the price in force when it ran.
    """

    pool = models.ForeignKey("scheduler_app.Pool", on_delete=models.PROTECT, related_name="prices")
    usd_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=PRICE_DECIMAL_PLACES, help_text="USD per whole GPU and hour."
    )
    effective_from = models.DateTimeField(help_text="From when this price applies (UTC).")
    source = models.TextField(blank=True, help_text="Where the number comes from.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = PoolPriceQuerySet.as_manager()

    class Meta:
        ordering = ["pool__name", "-effective_from", "-id"]
        indexes = [models.Index(fields=["pool", "effective_from"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(usd_per_gpu_hour__gt=0, usd_per_gpu_hour__lte=MAX_USD_PER_GPU_HOUR),
                name="poolprice_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pool} {self.usd_per_gpu_hour} USD/GPU-h from {self.effective_from:%Y-%m-%d %H:%M} UTC"


class ResizeOffer(models.Model):
    """A share change offered to a running single-card request because its measured utilization says it
    would lose little at a smaller share (or is starved at its own); milli per card.

    At most one open offer (offered or accepted) per request. An accepted offer is the scheduler's to
    apply at the request's next checkpoint (`resizes_to_apply()`); it marks it applied."""

    request = models.ForeignKey(
        "scheduler_app.GpuRequest", on_delete=models.CASCADE, related_name="resize_offers"
    )
    from_milli = models.PositiveIntegerField()
    to_milli = models.PositiveIntegerField()
    busy_percent = models.PositiveSmallIntegerField(help_text="Measured: how busy the job kept its share.")
    slowdown_percent = models.SmallIntegerField(help_text="Predicted runtime change; negative: faster.")
    saving_percent = models.SmallIntegerField(help_text="Predicted cost change for the same work; + cheaper.")
    reason = models.CharField(max_length=500)
    state = models.CharField(max_length=16, choices=ResizeState.choices, default=ResizeState.OFFERED)
    offered_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    closed_at = models.DateTimeField(null=True, blank=True, help_text="When it was applied or withdrawn.")

    class Meta:
        ordering = ["-offered_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["request"],
                condition=Q(state__in=OPEN_RESIZE_STATES),
                name="resizeoffer_one_open_per_request",
            ),
            models.CheckConstraint(
                condition=Q(from_milli__gte=1, from_milli__lte=1000, to_milli__gte=1, to_milli__lte=1000)
                & ~Q(from_milli=F("to_milli")),
                name="resizeoffer_shares_valid",
            ),
            models.CheckConstraint(condition=Q(state__in=ResizeState.values), name="resizeoffer_state_valid"),
        ]

    def __str__(self) -> str:
        return f"request {self.request_id}: {self.from_milli} → {self.to_milli} milli ({self.state})"


class LedgerEntry(models.Model):
    """What one allocation segment cost from `start` to `end` (aware UTC) at one price and billing mode.

    amount_usd = usd_per_gpu_hour * milli/1000 * seconds/3600, kept to 10 decimal places; seconds is
    the exact length (microseconds included). One entry per (allocation, start): metering again from
    the same point writes nothing, and the next entry starts where the last one ended, so no second
    is billed twice or lost.
    """

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="ledger_entries")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    request = models.ForeignKey("scheduler_app.GpuRequest", on_delete=models.PROTECT, related_name="+")
    allocation = models.ForeignKey(
        "scheduler_app.Allocation", on_delete=models.PROTECT, related_name="ledger_entries"
    )
    pool = models.ForeignKey("scheduler_app.Pool", on_delete=models.PROTECT, related_name="+")
    billing_mode = models.CharField(max_length=16)
    milli = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    seconds = models.DecimalField(max_digits=16, decimal_places=6)
    usd_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=PRICE_DECIMAL_PLACES)
    amount_usd = models.DecimalField(max_digits=20, decimal_places=10)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["start", "id"]
        indexes = [models.Index(fields=["team", "start"]), models.Index(fields=["allocation", "end"])]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "start"], name="ledger_one_entry_per_segment_start"
            ),
            models.CheckConstraint(condition=Q(end__gt=models.F("start")), name="ledger_end_after_start"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.amount_usd} USD ({self.start:%Y-%m-%d %H:%M:%S}+{self.seconds}s)"


class Budget(models.Model):
    """A team's monthly budget in USD (per user when `user` is set), its alert thresholds in whole
    percent, and what happens at 100 % (`policy`; stop_running waits `grace_s` seconds first)."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="budgets")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    monthly_usd = models.DecimalField(max_digits=12, decimal_places=2)
    thresholds_percent = models.JSONField(default=list)
    policy = models.CharField(max_length=24, choices=BudgetPolicy.choices, default=BudgetPolicy.ALERT_ONLY)
    grace_s = models.PositiveIntegerField(default=3600)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["team"], condition=Q(user__isnull=True), name="budget_one_per_team"
            ),
            models.UniqueConstraint(
                fields=["team", "user"], condition=Q(user__isnull=False), name="budget_one_per_team_user"
            ),
            models.CheckConstraint(condition=Q(monthly_usd__gt=0), name="budget_positive"),
            models.CheckConstraint(condition=Q(policy__in=BudgetPolicy.values), name="budget_policy_valid"),
        ]

    def __str__(self) -> str:
        who = f" for {self.user}" if self.user_id else ""
        return f"{self.team}{who}: {self.monthly_usd} USD a month"


class BudgetCrossing(models.Model):
    """A budget's threshold crossed in one month (first day, UTC): raised once, never again that month."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="crossings")
    month = models.DateField()
    threshold_percent = models.PositiveSmallIntegerField()
    spend_usd = models.DecimalField(max_digits=20, decimal_places=10)
    crossed_at = models.DateTimeField()

    class Meta:
        ordering = ["-crossed_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "month", "threshold_percent"], name="budgetcrossing_once_per_month"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} crossed {self.threshold_percent} % in {self.month:%Y-%m}"


class CapacityMove(models.Model):
    """A request switched back to on-demand billing while on spot capacity: the scheduler moves it to
    on-demand capacity at its next checkpoint, then stamps done_at. One open move per request."""

    request = models.ForeignKey("scheduler_app.GpuRequest", on_delete=models.CASCADE, related_name="+")
    to_capacity_type = models.CharField(max_length=16)
    requested_at = models.DateTimeField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["request"], condition=Q(done_at__isnull=True), name="capacitymove_one_open"
            ),
        ]

    def __str__(self) -> str:
        return f"move {self.request_id} to {self.to_capacity_type}"


class SharePremium(models.Model):
    """An operator's premium (multiplier > 1) or discount (< 1) on slices of one size, from effective_from.

    A slice pays its share of the card (milli/1000) times this multiplier; sizes without a row pay 1.
    Rows are never changed: a new multiplier is a new row, so past usage keeps the one it ran under.
    """

    gpu_milli = models.PositiveIntegerField(help_text="The slice size it applies to, in milli-GPU.")
    multiplier = models.DecimalField(
        max_digits=6, decimal_places=4, help_text="1.10 is a 10 % premium, 0.90 a 10 % discount."
    )
    effective_from = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_milli", "-effective_from", "-id"]
        indexes = [models.Index(fields=["gpu_milli", "effective_from"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_milli__gte=1, gpu_milli__lte=1000), name="sharepremium_milli_1_to_1000"
            ),
            models.CheckConstraint(
                condition=Q(multiplier__gt=0, multiplier__lte=10), name="sharepremium_multiplier_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_milli} milli x{self.multiplier} from {self.effective_from:%Y-%m-%d %H:%M} UTC"


class FeedKind(models.TextChoices):
    OCCUPANCY = "occupancy", "Occupancy (cheap when idle, near on-demand when full)"
    REPLAY = "replay", "Replay a recorded spot history"
    UPLOAD = "upload", "Uploaded price file"


class SpotFeed(models.Model):
    """What drives a pool's price over time. The periodic upkeep advances occupancy and replay feeds;
    an upload feed only plays the rows uploaded (the upkeep leaves it alone)."""

    pool = models.OneToOneField("scheduler_app.Pool", on_delete=models.CASCADE, related_name="spot_feed")
    kind = models.CharField(max_length=16, choices=FeedKind.choices, default=FeedKind.OCCUPANCY)
    min_fraction = models.DecimalField(
        max_digits=5, decimal_places=4, default=Decimal("0.3000"), help_text="Idle price / on-demand."
    )
    max_fraction = models.DecimalField(
        max_digits=5, decimal_places=4, default=Decimal("0.9000"), help_text="Full price / on-demand."
    )
    replay_file = models.CharField(
        max_length=16, default="gcp", help_text="Which shared/prices/spot_history_<name>.csv to replay."
    )
    replay_series = models.CharField(
        max_length=200,
        blank=True,
        help_text="cloud/region/zone/instance type; blank: the one that moves most.",
    )
    replay_speedup = models.PositiveIntegerField(default=1, help_text="Recorded seconds per real second.")
    started_at = models.DateTimeField(default=timezone.now, help_text="Now ↔ the recording's first instant.")
    last_advanced_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True, help_text="What the last advance did, or why not.")

    class Meta:
        ordering = ["pool__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(min_fraction__gt=0, max_fraction__lte=1)
                & Q(min_fraction__lte=models.F("max_fraction")),
                name="spotfeed_bounds",
            ),
            models.CheckConstraint(condition=Q(kind__in=FeedKind.values), name="spotfeed_kind_valid"),
            models.CheckConstraint(condition=Q(replay_speedup__gte=1), name="spotfeed_speedup_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.pool} {self.kind} feed"
