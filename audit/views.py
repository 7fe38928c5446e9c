"""The notices' pages: a member dismisses a notice for themselves, a team admin acknowledges it for the
team; both go back to the page the notice was shown on."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from audit.notices import acknowledge_notice, dismiss_notice, visible_notices


@login_required
@require_POST
def notice_dismiss(request, pk):
    """A member has read a notice of their team: it leaves their own lists; back to the page it was on."""
    dismiss_notice(get_object_or_404(visible_notices(request.user), pk=pk), user=request.user)
    return _back(request)


@login_required
@require_POST
def notice_acknowledge(request, pk):
    """A team admin acknowledges a notice for the whole team; back to the page it was on."""
    notice = acknowledge_notice(get_object_or_404(visible_notices(request.user), pk=pk), user=request.user)
    messages.success(request, f"Acknowledged for team {notice.team.name}: it leaves every member's notices.")
    return _back(request)


def _back(request):
    """To the page named in `next` when it is on this site, else home."""
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = "home"
    return redirect(back)
