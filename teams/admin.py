from django.contrib import admin

from teams.models import ApiToken, Membership, Team, UserUnixAccount
from teams.services import set_team_unix_account, set_user_unix_account


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "unix_account", "member_count", "created_at"]
    search_fields = ["name", "slug", "unix_account"]
    prepopulated_fields = {"slug": ["name"]}
    # Set on the team's page (teams.services.set_idle_policy).
    readonly_fields = ["release_idle_allocations", "idle_minutes", "idle_util_percent"]
    inlines = [MembershipInline]

    @admin.display(description="Members")
    def member_count(self, team):
        return team.memberships.count()

    def save_model(self, request, obj, form, change):
        """The Unix account is set through set_team_unix_account, which logs the change."""
        unix_account = obj.unix_account
        obj.unix_account = form.initial.get("unix_account", "")
        super().save_model(request, obj, form, change)
        set_team_unix_account(obj, unix_account=unix_account, actor=request.user)


@admin.register(UserUnixAccount)
class UserUnixAccountAdmin(admin.ModelAdmin):
    """Each change goes through set_user_unix_account, which logs it; deleting a mapping is mapping
    the user back to their team's account."""

    list_display = ["user", "unix_account", "updated_at"]
    search_fields = ["user__username", "unix_account"]
    autocomplete_fields = ["user"]

    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj else []

    def save_model(self, request, obj, form, change):
        set_user_unix_account(obj.user, unix_account=obj.unix_account, actor=request.user)

    def delete_model(self, request, obj):
        set_user_unix_account(obj.user, unix_account="", actor=request.user)

    def delete_queryset(self, request, queryset):
        for mapping in queryset.select_related("user"):
            self.delete_model(request, mapping)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "joined_at"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "user__email", "team__name"]
    autocomplete_fields = ["user", "team"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["user", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]

    def has_add_permission(self, request):
        return False  # tokens are created by their users, who see the secret once
