from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from portal.models import Membership
from scheduler_app.selectors import requests_visible_to


@login_required
def home(request):
    memberships = Membership.objects.filter(user=request.user).select_related("team")
    recent = requests_visible_to(request.user).select_related("team", "pool")[:20]
    return render(request, "portal/home.html", {"memberships": memberships, "recent": recent})


def healthz(request):
    return JsonResponse({"status": "ok"})
