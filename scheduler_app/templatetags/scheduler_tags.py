"""Permission filters for the pages, so templates ask scheduler_app.permissions instead of repeating
lifecycle rules: {% if r|can_cancel:user %}; and a team's quota use as a section of its page
({% team_quota team %})."""

from django import template

from scheduler_app import permissions
from scheduler_app.selectors import quota_usage

register = template.Library()


@register.filter
def can_cancel(request, user) -> bool:
    return permissions.can_cancel(user, request)


@register.filter
def can_release(request, user) -> bool:
    return permissions.can_release(user, request)


@register.filter
def can_open_session(request, user) -> bool:
    return permissions.can_open_session(user, request)


@register.inclusion_tag("portal/teams/_quota.html")
def team_quota(team):
    """The team page's quota section: per pool, the guarantee, the use and how much of it is borrowed."""
    return {"usage": quota_usage(team)}
