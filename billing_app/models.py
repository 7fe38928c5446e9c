"""The price catalog: what one whole card of a pool costs per hour, in USD, over time.

Money is Decimal with the currency in the name (USD); times are aware UTC.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

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
