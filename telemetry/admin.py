from django.contrib import admin

from infra.admin_base import RecordAdmin
from telemetry.models import GpuSample


@admin.register(GpuSample)
class GpuSampleAdmin(RecordAdmin):
    """Agent readings, read-only: they are what the node measured."""

    list_display = [
        "gpu",
        "sampled_at",
        "gpu_util_percent",
        "memory_used_mib",
        "power_mw",
        "temperature_c",
        "received_at",
    ]
    list_filter = ["gpu__node__pool", "gpu__node"]
    search_fields = ["gpu__uuid", "gpu__node__name"]
    date_hierarchy = "sampled_at"
    list_select_related = ["gpu__node"]
