"""Permission filters for notices on the pages, asking audit.permissions: {% if n|can_acknowledge:user %}."""

from django import template

from audit import permissions

register = template.Library()


@register.filter
def can_acknowledge(notice, user) -> bool:
    return permissions.can_acknowledge_notice(user, notice)
