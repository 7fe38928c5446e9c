"""Telemetry's parts of other apps' pages, so their views need not read telemetry:
{% utilization_chart r %} on a request's page."""

from django import template

from telemetry.selectors import request_time_range

register = template.Library()


@register.inclusion_tag("portal/requests/_utilization_chart.html")
def utilization_chart(gpu_request) -> dict:
    """The request's utilization chart over its own time range (none before it held a card); the page's
    script fills it from the request's telemetry series."""
    return {"r": gpu_request, "chart_range": request_time_range(gpu_request)}
