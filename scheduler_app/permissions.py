"""Who may do what with requests and the cluster. Each answer is a boolean, asked alike by services
(through teams.permissions.require), views, the API and templates (scheduler_tags)."""

from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.rules.lifecycle import TRANSITIONS, release_target
from teams.permissions import can_operate, is_member


def can_submit(user, team) -> bool:
    """Members submit requests for their own teams."""
    return team is not None and is_member(user, team)


def can_act_on(user, request: GpuRequest) -> bool:
    """Members of a request's team act on it (cancel, release), whatever its state."""
    return is_member(user, request.team)


def can_cancel(user, request: GpuRequest) -> bool:
    """A member may cancel while the lifecycle still allows going to cancelled."""
    return RequestState.CANCELLED in TRANSITIONS[request.state] and can_act_on(user, request)


def can_release(user, request: GpuRequest) -> bool:
    """A member may release what holds GPUs, where the lifecycle allows the release's end state."""
    target = release_target(request.state)
    return target in TRANSITIONS[request.state] and can_act_on(user, request)


def can_open_session(user, request: GpuRequest) -> bool:
    """A terminal, a command or a forwarded port inside the allocation: its team's members and
    operators, while it runs and is interactive (it has no command of its own)."""
    allowed = can_operate(user) or can_act_on(user, request)
    return allowed and request.state == RequestState.RUNNING and request.is_interactive()
