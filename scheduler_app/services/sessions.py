"""Interactive sessions: opened by a member of the request's team (or an operator) on a running
interactive request, relayed to the node's agent, closed once. Each open and close is in the event log
(who opened what, when; how it ended and how many bytes went through)."""

import datetime as dt

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.choices import NoticeKind
from audit.events import log_event
from audit.notices import request_notice_key, resolve_notice
from scheduler_app.choices import Backend, SessionKind
from scheduler_app.constants import ACTIVE_AGAIN_EVENT, ACTIVITY_RESOLUTION_S
from scheduler_app.models import Allocation, GpuRequest, InteractiveSession, Node
from scheduler_app.permissions import can_open_session
from teams.permissions import require

MAX_COMMAND_ARGS = 256
MAX_COMMAND_CHARS = 8192


def open_session(
    user, request_id: int, *, kind: str, command: list[str] | None = None, port: int | None = None
) -> InteractiveSession:
    """A new session on the request, on the node its first card is on. Raises NotAllowed unless the
    user may open one there now (can_open_session), ValidationError for a bad command or port."""
    command = list(command or [])
    if kind not in SessionKind.values:
        raise ValidationError({"kind": f"One of {', '.join(SessionKind.values)}."})
    if kind == SessionKind.PORT_FORWARD and not (port and 1 <= port <= 65535):
        raise ValidationError({"port": "A TCP port, 1 to 65535."})
    if not all(isinstance(arg, str) for arg in command) or len(command) > MAX_COMMAND_ARGS:
        raise ValidationError({"command": "A list of at most 256 strings."})
    if sum(len(arg) for arg in command) > MAX_COMMAND_CHARS:
        raise ValidationError({"command": f"At most {MAX_COMMAND_CHARS} characters."})
    with transaction.atomic():
        request = GpuRequest.objects.select_for_update().select_related("team").get(pk=request_id)
        require(
            can_open_session(user, request),
            "Only the request's team and operators open sessions, on a running interactive request.",
        )
        node = _node_of(request)
        require(node is not None, "This request's pool runs no node agent: it has no sessions.")
        session = InteractiveSession.objects.create(
            request=request,
            node=node,
            user=user,
            kind=kind,
            command=command,
            port=port if kind == SessionKind.PORT_FORWARD else None,
        )
        data = {"session": str(session.key), "kind": kind, "node": node.name}
        if command:
            data["command"] = command
        if session.port:
            data["port"] = session.port
        log_event(session, "session opened", actor=user, team=request.team, data=data)
    return session


def open_lab(user, request_id: int) -> InteractiveSession:
    """The user's open JupyterLab session on the request, else a new one: opening the Lab is one session
    however many requests and websockets its page makes. Raises NotAllowed as open_session does."""
    with transaction.atomic():
        request = GpuRequest.objects.select_for_update().select_related("team").filter(pk=request_id).first()
        require(request is not None and can_open_session(user, request), "Not your team's running request.")
        lab = InteractiveSession.objects.filter(
            request=request, user=user, kind=SessionKind.LAB, closed_at__isnull=True
        ).first()
        return lab or open_session(user, request_id, kind=SessionKind.LAB)


def close_labs(request_ids: list[int]) -> None:
    """The Lab sessions of requests that stop running end with them (their Jupyter servers do)."""
    open_labs = InteractiveSession.objects.filter(
        request_id__in=request_ids, kind=SessionKind.LAB, closed_at__isnull=True
    )
    for key in open_labs.values_list("key", flat=True):
        close_session(key, reason="the request stopped running")


def _node_of(request: GpuRequest) -> Node | None:
    allocation = (
        Allocation.objects.committed()
        .filter(request=request, gpu__node__pool__backend=Backend.AGENT)
        .select_related("gpu__node")
        .order_by("gpu__node_id")
        .first()
    )
    return allocation.gpu.node if allocation else None


def close_session(
    key, *, reason: str, exit_code: int | None = None, bytes_in: int = 0, bytes_out: int = 0
) -> bool:
    """Close the session once (a second close changes nothing and returns False)."""
    with transaction.atomic():
        session = (
            InteractiveSession.objects.select_for_update()
            .select_related("request", "user")
            .filter(key=key, closed_at__isnull=True)
            .first()
        )
        if session is None:
            return False
        session.closed_at = timezone.now()
        session.exit_code = exit_code
        session.bytes_in, session.bytes_out = bytes_in, bytes_out
        session.close_reason = reason[:200]
        session.save(update_fields=["closed_at", "exit_code", "bytes_in", "bytes_out", "close_reason"])
        data = {"session": str(session.key), "bytes_in": bytes_in, "bytes_out": bytes_out}
        if exit_code is not None:
            data["exit_code"] = exit_code
        log_event(session, "session closed", actor_name=session.user.get_username(), reason=reason, data=data)
    return True


def session_for_node(node: Node, key) -> InteractiveSession | None:
    """The open session `key` on this node, for its agent's side of the relay (None: not this node's)."""
    return InteractiveSession.objects.filter(key=key, node=node, closed_at__isnull=True).first()


def record_activity(request: GpuRequest | int, at: dt.datetime | None = None) -> bool:
    """Someone worked in the request at `at`: terminal or shell input through the relay, or a kernel
    execution a Jupyter proxy reports. It keeps the request from being idle (telemetry.idle), and an
    idle warning already sent is withdrawn, its stop called off (an Event on the request says so).
    Stored to ACTIVITY_RESOLUTION_S: a call within that of the last one writes nothing. Returns whether
    it wrote."""
    at = at or timezone.now()
    request_id = getattr(request, "pk", request)
    stale = Q(last_activity_at__isnull=True) | Q(
        last_activity_at__lte=at - dt.timedelta(seconds=ACTIVITY_RESOLUTION_S)
    )
    with transaction.atomic():
        if not GpuRequest.objects.filter(stale, pk=request_id).update(last_activity_at=at):
            return False
        row = GpuRequest.objects.only("pk", "team_id", "state").get(pk=request_id)
        if resolve_notice(row.team_id, request_notice_key(NoticeKind.IDLE, row.pk), now=at):
            log_event(
                row,
                ACTIVE_AGAIN_EVENT,
                from_state=row.state,
                actor_name="activity",
                reason="used again after the idle warning: the idle stop is called off",
            )
    return True
