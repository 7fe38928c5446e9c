"""Request a GPU (the form asks the API for its estimate), list and follow requests, cancel or release.
What these pages show of billing (the form's prices, the segments' costs, a resize offer) is billing's:
its template tags (billing_tags) and its views (billing_app.views)."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from infra.messages import told
from scheduler_app.choices import RequestState
from scheduler_app.filters import GpuRequestFilter
from scheduler_app.forms import RequestForm
from scheduler_app.live.streams import stream_paths
from scheduler_app.models import GpuRequest
from scheduler_app.permissions import can_open_session
from scheduler_app.selectors import (
    fold_checkpoints,
    request_events,
    request_list,
    request_segments,
    requests_visible_to,
)
from scheduler_app.services.requests import cancel_request, release_request, submit_request
from teams.permissions import require

PAGE_SIZE = 25


@login_required
def request_new(request):
    form = RequestForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            gpu_request = submit_request(user=request.user, **form.service_kwargs())
            messages.success(request, f"{gpu_request.name} submitted; it is pending a scheduling pass.")
            return redirect("request_detail", pk=gpu_request.pk)
    context = {
        "form": form,
        "command_given": bool((form["command"].value() or "").strip()),
        # The script estimates through the API, which names teams by slug.
        "team_slugs": {str(t.pk): t.slug for t in form.fields["team"].queryset},
    }
    return render(request, "portal/requests/new.html", context)


@login_required
def request_index(request):
    # The form sends every field, an empty one meaning any; the filter refuses empty values (API).
    given = {name: value for name, value in request.GET.items() if value}
    filters = GpuRequestFilter(given, request_list(request.user), request=request)
    requests = filters.qs if filters.is_valid() else filters.queryset.none()
    page = Paginator(requests, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"filters": filters.form, "page": page, "streams": stream_paths(request.user)}
    return render(request, "portal/requests/index.html", context)


def _visible_request(request, pk):
    """The request if the user's teams own it (or they operate the platform); 404 otherwise."""
    visible = requests_visible_to(request.user).with_capacity()
    return get_object_or_404(visible.select_related("team", "pool", "user"), pk=pk)


@login_required
def request_detail(request, pk):
    gpu_request, events = _request_and_timeline(request, pk)
    segments = list(request_segments(gpu_request))
    context = {
        "r": gpu_request,
        "timeline": fold_checkpoints(events),
        "segments": segments,
        "streams": stream_paths(request.user, gpu_request.team),
        "allocation_labels": {str(s.pk): str(s.gpu) for s in segments},
        "max_checkpoint_min": settings.SPOT_MAX_CHECKPOINT_INTERVAL_S // 60,
    }
    return render(request, "portal/requests/detail.html", context)


@login_required
def request_terminal(request, pk):
    """A terminal in the running interactive allocation, in the browser (scheduler_app/live/sessions.py
    relays it); 403 to whoever may not open one."""
    gpu_request = get_object_or_404(GpuRequest.objects.select_related("team"), pk=pk)
    require(
        can_open_session(request.user, gpu_request),
        "Only the request's team and operators open a terminal, on a running interactive request.",
    )
    return render(request, "portal/requests/terminal.html", {"r": gpu_request})


def _request_and_timeline(request, pk, tries: int = 3):
    """The request and its events as of one moment: a pass may commit between the two reads, so read
    again until the badge (the row's state) is the timeline's last step."""
    states = frozenset(RequestState.values)
    for _ in range(tries):
        gpu_request = _visible_request(request, pk)
        events = list(request_events(gpu_request))
        moves = [e for e in events if e.to_state in states]  # not checkpoints or notices
        if not moves or moves[-1].to_state == gpu_request.state:
            break
    return gpu_request, events


@login_required
@require_POST
def request_cancel(request, pk):
    return _act_on(request, pk, cancel_request, refused="Not cancelled", done="{name} cancelled.")


@login_required
@require_POST
def request_release(request, pk):
    done = "{name} released; its GPUs are free again."
    return _act_on(request, pk, release_request, refused="Not released", done=done)


def _act_on(request, pk, service, *, refused: str, done: str):
    """Call `service` on the visible request for the user, say how it went (`done` names the request as
    {name}) and go back to the request's page."""
    gpu_request = _visible_request(request, pk)
    with told(request, refused=refused, done=done.format(name=gpu_request.name)):
        service(gpu_request, user=request.user)
    return redirect("request_detail", pk=pk)
