"""Permission filters for the pages, so templates ask scheduler_app.permissions instead of repeating
lifecycle rules: {% if r|can_cancel:user %}."""

from django import template

from billing_app import permissions as billing_permissions
from scheduler_app import permissions

register = template.Library()


@register.filter
def can_cancel(request, user) -> bool:
    return permissions.can_cancel(user, request)


@register.filter
def can_release(request, user) -> bool:
    return permissions.can_release(user, request)


@register.filter
def can_accept_resize(offer, user) -> bool:
    return billing_permissions.can_accept_resize(user, offer)
