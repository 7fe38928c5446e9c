from django.contrib import admin

from audit.models import Event, Notice
from infra.admin_base import RecordAdmin


@admin.register(Event)
class EventAdmin(RecordAdmin):
    list_display = [
        "created_at",
        "actor_label",
        "content_type",
        "object_id",
        "from_state",
        "to_state",
        "reason",
    ]
    list_filter = ["content_type", "to_state", "team"]
    search_fields = ["actor_label", "reason"]
    date_hierarchy = "created_at"


@admin.register(Notice)
class NoticeAdmin(RecordAdmin):
    list_display = ["created_at", "team", "kind", "text", "acknowledged_at", "acknowledged_by", "resolved_at"]
    list_filter = ["kind", "team"]
    search_fields = ["text", "key"]
    date_hierarchy = "created_at"
