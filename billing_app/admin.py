from django.contrib import admin

from billing_app.models import PoolPrice, SharePremium, SpotFeed
from infra.admin_base import RecordAdmin


@admin.register(PoolPrice)
class PoolPriceAdmin(RecordAdmin):
    """Read-only: prices are set through set_pool_price (the operator pools page or the API), which
    audits them and keeps the history."""

    list_display = ["pool", "usd_per_gpu_hour", "effective_from", "source", "created_by", "created_at"]
    list_filter = ["pool", "pool__capacity_type"]
    list_select_related = ["pool", "created_by"]
    date_hierarchy = "effective_from"


@admin.register(SharePremium)
class SharePremiumAdmin(RecordAdmin):
    """Read-only: set through set_share_premium (POST /api/v1/prices/premiums/), which audits it."""

    list_display = ["gpu_milli", "multiplier", "effective_from", "created_by", "created_at"]


@admin.register(SpotFeed)
class SpotFeedAdmin(RecordAdmin):
    """Read-only: chosen through set_spot_feed (PUT /api/v1/pools/{name}/spot-feed/)."""

    list_display = ["pool", "kind", "min_fraction", "max_fraction", "replay_file", "last_advanced_at", "note"]
