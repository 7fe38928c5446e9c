from django.contrib import admin, messages

from infra.admin_base import RecordAdmin
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node, Pool, RoomMove, RoomPlan, TeamQuota
from scheduler_app.rules.lifecycle import TERMINAL_STATES, TRANSITIONS
from scheduler_app.services.inventory import set_node_status
from scheduler_app.services.transitions import transition_requests


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_model",
        "capacity_type",
        "granularity_milli",
        "mig_mode",
        "backend",
        "consolidation",
    ]
    list_filter = ["capacity_type", "gpu_model", "backend", "consolidation"]
    search_fields = ["name", "gpu_model"]
    # Set on the operator pool page or the API (update_pool): only with no work on the pool.
    readonly_fields = ["mig_mode"]


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "uuid", "model", "memory_mib", "mig_capable", "mig_layout"]
    # Set on the operator node page or the API (set_mig_layout): checked against the geometry.
    readonly_fields = ["mig_layout"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "status", "last_heartbeat_at", "cpu_milli", "memory_mib"]
    list_filter = ["status", "pool", "pool__capacity_type"]
    search_fields = ["name", "gpus__uuid"]
    # Isolation: as the node's agent reports it at registration.
    readonly_fields = ["status", "last_heartbeat_at", "created_at", "isolation_label"]
    inlines = [GpuInline]
    actions = ["drain", "undrain"]

    @admin.display(description="Isolation")
    def isolation_label(self, node):
        return node.isolation_label()

    @admin.action(description="Drain: take no new work", permissions=["change"])
    def drain(self, request, queryset):
        self._set_status(request, queryset, NodeStatus.DRAINING)

    @admin.action(description="Undrain: ready for work", permissions=["change"])
    def undrain(self, request, queryset):
        self._set_status(request, queryset, NodeStatus.READY)

    def _set_status(self, request, queryset, status):
        for node in queryset:
            set_node_status(node, status, actor=request.user, reason="operator action in admin")
        self.message_user(request, f"{queryset.count()} node(s) now {status}.", messages.SUCCESS)


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "model", "memory_mib", "mig_capable", "mig_layout", "uuid"]
    list_filter = ["model", "mig_capable", "node__pool"]
    search_fields = ["uuid", "node__name", "model"]
    list_select_related = ["node"]
    readonly_fields = ["mig_layout"]


@admin.register(TeamQuota)
class TeamQuotaAdmin(admin.ModelAdmin):
    list_display = ["team", "pool", "guaranteed_milli"]
    list_filter = ["pool", "team"]
    search_fields = ["team__name", "pool__name"]


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    can_delete = False
    readonly_fields = ["gpu", "milli", "gpu_memory_mib", "billing_mode", "borrowed", "started_at", "ended_at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(GpuRequest)
class GpuRequestAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "team",
        "user",
        "task_type",
        "share",
        "billing_mode",
        "state",
        "priority",
        "created_at",
    ]
    list_filter = ["state", "task_type", "billing_mode", "team", "pool"]
    search_fields = ["name", "user__username", "team__name", "command"]
    date_hierarchy = "created_at"
    list_select_related = ["team", "user"]
    readonly_fields = [
        "state",
        "pending_reason",
        "estimated_start_at",
        "scheduled_at",
        "started_at",
        "ended_at",
    ]
    inlines = [AllocationInline]
    actions = ["cancel"]

    @admin.action(description="Cancel: stop them and free their GPUs", permissions=["change"])
    def cancel(self, request, queryset):
        live = set(TRANSITIONS) - TERMINAL_STATES
        moved = transition_requests(
            queryset.values_list("pk", flat=True),
            RequestState.CANCELLED,
            from_states=live,
            actor=request.user,
            reason="cancelled by an operator in admin",
        )
        self.message_user(request, f"{len(moved)} request(s) cancelled.", messages.SUCCESS)

    @admin.display(description="Share")
    def share(self, obj):
        return obj.share_label()


@admin.register(Allocation)
class AllocationAdmin(RecordAdmin):
    list_display = ["request", "gpu", *Allocation.SEGMENT_FIELDS]
    list_filter = ["billing_mode", "borrowed", "gpu__node__pool", ("ended_at", admin.EmptyFieldListFilter)]
    search_fields = ["request__name", "gpu__uuid", "gpu__node__name"]
    list_select_related = ["request", "gpu__node"]


class RoomMoveInline(admin.TabularInline):
    model = RoomMove
    extra = 0
    fields = ["request", "moved_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(RoomPlan)
class RoomPlanAdmin(RecordAdmin):
    """Consolidation's plans: which jobs move to make room for which waiting request, and how it ended."""

    list_display = ["request", "node", "ready_by", "created_at", "ended_at", "outcome"]
    list_filter = [("ended_at", admin.EmptyFieldListFilter)]
    search_fields = ["request__name", "node", "moves__request__name"]
    list_select_related = ["request"]
    inlines = [RoomMoveInline]
