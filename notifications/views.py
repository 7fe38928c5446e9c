"""The notification pages: a team's channels (its members see them, its admins add and manage them) and
each user's own, each channel's page with its delivery log, and the actions on it. Thin: the services
decide who may (a refusal is the 403 page, NotAllowed propagating) and validate; a channel the user may
not see is a 404, whether it exists or not. A webhook's signing secret is shown once, in the answer to the
POST that made it (adding the channel, or a new secret)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from infra.messages import told
from notifications import services
from notifications.choices import ChannelKind
from notifications.forms import ChannelForm
from notifications.permissions import can_add_channel, can_manage_channel
from notifications.selectors import attempt_log, channels_visible_to, waiting_count
from teams.permissions import is_member, require
from teams.selectors import teams_visible_to


def _channel(request, pk):
    return get_object_or_404(channels_visible_to(request.user), pk=pk)


def _member_team(request, slug):
    """The team if the user is one of its members (an operator outside it sees none of its channels)."""
    team = get_object_or_404(teams_visible_to(request.user).distinct(), slug=slug)
    if not is_member(request.user, team):
        raise Http404
    return team


def _channels_page(request, *, team, form=None, status=200):
    owned = team.notification_channels.all() if team else request.user.notification_channels.all()
    context = {
        "team": team,
        "channels": owned,
        "can_add": can_add_channel(request.user, team),
        "form": form or ChannelForm(),
    }
    return render(request, "portal/notifications/channels.html", context, status=status)


def _add(request, team):
    if team is not None:
        require(can_add_channel(request.user, team), f"Only the admins of {team.name} add its channels.")
    form = ChannelForm(request.POST)
    if form.is_valid():
        with form.service_errors():
            channel, secret = services.create_channel(request.user, team=team, **form.cleaned_data)
            messages.success(request, f"Channel {channel.name} added.")
            if secret:
                return _channel_page(request, channel, secret=secret)
            return redirect("channel_detail", pk=channel.pk)
    return _channels_page(request, team=team, form=form, status=400)


def _channel_page(request, channel, secret=""):
    context = {
        "channel": channel,
        "can_manage": can_manage_channel(request.user, channel),
        "is_webhook": channel.kind == ChannelKind.WEBHOOK,
        "secret": secret,
        "attempts": attempt_log(channel),
        "waiting": waiting_count(channel),
    }
    return render(request, "portal/notifications/channel.html", context)


@login_required
def my_channels(request):
    if request.method == "POST":
        return _add(request, None)
    return _channels_page(request, team=None)


@login_required
def team_channels(request, slug):
    team = _member_team(request, slug)
    if request.method == "POST":
        return _add(request, team)
    return _channels_page(request, team=team)


@login_required
def channel_detail(request, pk):
    return _channel_page(request, _channel(request, pk))


@login_required
@require_POST
def channel_test(request, pk):
    channel = _channel(request, pk)
    queued = "Test message queued; it shows in the log below."
    with told(request, refused="No test sent", done=queued, refusals=ValidationError):
        services.send_test(channel, actor=request.user)
    return redirect("channel_detail", pk=pk)


@login_required
@require_POST
def channel_pause(request, pk):
    channel = services.pause_channel(
        _channel(request, pk), actor=request.user, reason=f"paused by {request.user.get_username()}"
    )
    messages.success(request, f"{channel.name} paused: nothing is sent to it until it is resumed.")
    return redirect("channel_detail", pk=pk)


@login_required
@require_POST
def channel_resume(request, pk):
    channel = services.resume_channel(_channel(request, pk), actor=request.user)
    messages.success(request, f"{channel.name} resumed.")
    return redirect("channel_detail", pk=pk)


@login_required
@require_POST
def channel_rotate_secret(request, pk):
    channel = _channel(request, pk)
    try:
        secret = services.rotate_secret(channel, actor=request.user)
    except ValidationError as refusal:
        messages.error(request, f"No new secret: {' '.join(refusal.messages)}")
        return redirect("channel_detail", pk=pk)
    messages.success(request, "New signing secret made; the old one signs nothing more.")
    return _channel_page(request, channel, secret=secret)


@login_required
@require_POST
def channel_delete(request, pk):
    channel = _channel(request, pk)
    services.delete_channel(channel, actor=request.user)
    messages.success(request, f"Channel {channel.name} deleted.")
    if channel.team_id:
        return redirect("team_channels", slug=channel.team.slug)
    return redirect("my_channels")
