from django.contrib import admin


class RecordAdmin(admin.ModelAdmin):
    """Records only services write (allocations, the event log, samples, prices): operators read them here."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
