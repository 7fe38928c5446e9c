"""The project's own pages: the home page (each kind of user's starting point) and the health checks."""

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from audit.notices import notices_for
from billing_app.ledger import team_spend_at_a_glance
from portal.health import LIVE, readiness
from scheduler_app.selectors import (
    cluster_picture,
    nodes_needing_attention,
    pending_queue,
    requests_visible_to,
)
from teams.models import Membership
from teams.permissions import can_operate

# The operator's home page lists at most this many nodes needing attention and waiting requests.
OPERATOR_LIST_LIMIT = 10


@login_required
def home(request):
    """A member's teams, spend, notices and recent requests; an operator's view of the cluster first (its
    capacity, the nodes needing attention, the queue)."""
    memberships = Membership.objects.filter(user=request.user).select_related("team")
    recent = requests_visible_to(request.user).select_related("team", "pool")[:20]
    context = {
        "memberships": memberships,
        "recent": recent,
        "notices": notices_for(request.user),
        "spend": team_spend_at_a_glance([m.team for m in memberships]),
    }
    if can_operate(request.user):
        attention, queue = nodes_needing_attention(), pending_queue()
        context["operator"] = {
            "pools": cluster_picture(request.user).pools,
            "attention": attention[:OPERATOR_LIST_LIMIT],
            "attention_count": attention.count(),
            "queue": queue[:OPERATOR_LIST_LIMIT],
            "queue_count": queue.count(),
        }
    return render(request, "portal/home.html", context)


def health_live(request):
    """Liveness: the process answers. It checks no service, so an outage elsewhere does not restart it.
    Under the ASGI server portal.health.AnswersLiveness answers it first; this serves WSGI and tests."""
    return JsonResponse(LIVE)


def health_ready(request):
    """Readiness: 200 when the database and Redis answer, 503 naming the one that does not."""
    report = readiness()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
