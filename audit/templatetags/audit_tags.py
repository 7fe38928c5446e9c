"""Notices on the pages: a team's notices as a section of its page ({% team_notices team %}), and the
permission filters asking audit.permissions ({% if n|can_acknowledge:user %})."""

from django import template

from audit import permissions
from audit.notices import notices_for

register = template.Library()


@register.filter
def can_acknowledge(notice, user) -> bool:
    return permissions.can_acknowledge_notice(user, notice)


@register.inclusion_tag("portal/_notices.html", takes_context=True)
def team_notices(context, team):
    """The team's notices the signed-in user has not put away, as the team page lists them."""
    request = context["request"]
    return {"notices": notices_for(request.user, team=team), "request": request, "user": request.user}
