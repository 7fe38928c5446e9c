from django.contrib import admin

from billing_app.models import PoolPrice
from portal.admin_base import RecordAdmin


@admin.register(PoolPrice)
class PoolPriceAdmin(RecordAdmin):
    """Read-only: prices are set through set_pool_price (the operator pools page or the API), which
    audits them and keeps the history."""

    list_display = ["pool", "usd_per_gpu_hour", "effective_from", "source", "created_by", "created_at"]
    list_filter = ["pool", "pool__capacity_type"]
    list_select_related = ["pool", "created_by"]
    date_hierarchy = "effective_from"
