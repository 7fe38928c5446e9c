"""GET /metrics for Prometheus: the bearer token METRICS_BEARER_TOKEN, or a signed-in operator (staff)."""

import hmac

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from teams.permissions import can_operate
from telemetry.prometheus import CONTENT_TYPE, exposition, latest_readings


@require_GET
def metrics(request):
    if not _allowed(request):
        refusal = HttpResponse("Give the metrics bearer token, or sign in as an operator.\n", status=401)
        refusal["WWW-Authenticate"] = "Bearer"
        return refusal
    return HttpResponse(exposition(latest_readings()), content_type=CONTENT_TYPE)


def _allowed(request) -> bool:
    if can_operate(request.user):
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    expected = settings.METRICS_BEARER_TOKEN
    return (
        bool(expected)
        and scheme.lower() == "bearer"
        and hmac.compare_digest(given.strip().encode(), expected.encode())
    )
