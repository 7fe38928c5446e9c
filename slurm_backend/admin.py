from django.contrib import admin

from slurm_backend.models import SlurmConnection, SlurmJob, SlurmNode, SlurmTeamAccount


class SlurmTeamAccountInline(admin.TabularInline):
    model = SlurmTeamAccount
    extra = 0


@admin.register(SlurmConnection)
class SlurmConnectionAdmin(admin.ModelAdmin):
    """A pool is connected by slurm_backend.services.connect_pool (it imports the nodes and sets the
    pool's backend and granularity); here operators see how its syncs go and set the teams' accounts."""

    list_display = ["pool", "url", "partition", "last_synced_at", "last_error"]
    readonly_fields = ["pool", "url", "partition", "last_synced_at", "last_error"]
    fields = [*readonly_fields, "output_dir", "card_memory_mib"]
    inlines = [SlurmTeamAccountInline]

    def has_add_permission(self, request):
        return False


@admin.register(SlurmNode)
class SlurmNodeAdmin(admin.ModelAdmin):
    list_display = ["node", "connection", "state", "status"]
    readonly_fields = ["node", "connection", "state", "status"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(SlurmJob)
class SlurmJobAdmin(admin.ModelAdmin):
    list_display = ["job_id", "request", "generation", "node", "state", "cards", "submitted_at", "ended_at"]
    list_filter = ["state", "connection"]
    search_fields = ["job_id", "request__name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
