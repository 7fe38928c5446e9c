"""Billing's parts of the scheduler's pages, so that those pages' views need not import billing: the price
block of the request form, the cost of each allocation segment and the resize offer on a request's page.
{% load billing_tags %} then {% form_prices form %}, {% for a, cost in segments|with_costs %},
{% resize_offer r user %}."""

from django import template
from django.utils import timezone

from billing_app import permissions
from billing_app.metering import segment_costs_usd
from billing_app.resizing import open_resize_offer
from billing_app.views import form_price_lines

register = template.Library()


@register.inclusion_tag("portal/requests/_price.html")
def form_prices(form) -> dict:
    return {"price_lines": form_price_lines(form)}


@register.filter
def with_costs(segments) -> list[tuple]:
    """Each allocation segment with what it cost in USD (an open one: so far), priced together."""
    return list(zip(segments, segment_costs_usd(segments, timezone.now()), strict=True))


@register.inclusion_tag("portal/requests/_resize_offer.html")
def resize_offer(gpu_request, user) -> dict:
    """The request's open resize offer (if any), with the accept button for those who may accept it."""
    return {"r": gpu_request, "resize": open_resize_offer(gpu_request), "user": user}


@register.filter
def can_accept_resize(offer, user) -> bool:
    return permissions.can_accept_resize(user, offer)
