"""Operator pages (staff only): drain and reclaim nodes, edit pools, set quotas, map teams and users to Unix
accounts, replay the history under a what-if; each change is audited by its service. The pools page, with
the price of each, is billing's (billing_app.views.pool_prices)."""

import datetime as dt
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from scheduler_app.filters import AuditEventFilter
from scheduler_app.forms import (
    MigLayoutForm,
    NodeStatusForm,
    PoolForm,
    QuotaForm,
    ReclaimForm,
    TeamUnixAccountForm,
    UserUnixAccountForm,
    WhatIfForm,
)
from scheduler_app.models import Node, Pool, TeamQuota, WhatIfRun
from scheduler_app.selectors import (
    audit_events,
    lost_for_silence,
    node_load,
    nodes_for_operators,
    status_event,
)
from scheduler_app.services.inventory import (
    reissue_agent_credential,
    set_mig_layout,
    set_node_status,
    update_pool,
)
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.quotas import set_team_quota
from scheduler_app.services.whatif import start_what_if
from teams.models import Team
from teams.permissions import can_operate
from teams.selectors import user_unix_accounts
from teams.services import set_team_unix_account, set_user_unix_account


def staff_required(view):
    """Logged-in staff only: anonymous users go to the login page, everyone else gets 403."""

    @login_required
    @wraps(view)
    def guarded(request, *args, **kwargs):
        if not can_operate(request.user):
            raise PermissionDenied("Operator pages are for platform operators.")
        return view(request, *args, **kwargs)

    return guarded


AUDIT_EVENTS_PER_PAGE = 50


@staff_required
def overview(request):
    """The audit log, filtered (AuditEventFilter, as the API's) and paged, newest first."""
    # The form sends every field, an empty one meaning any: the filter refuses empty values (API).
    given = {name: value for name, value in request.GET.items() if value and name != "page"}
    filters = AuditEventFilter(given, audit_events())
    events = filters.qs if filters.is_valid() else filters.queryset.none()
    page = Paginator(events, AUDIT_EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "portal/operator/overview.html", {"filters": filters.form, "page": page})


NODES_PER_PAGE = 50


@staff_required
def node_index(request):
    page = Paginator(nodes_for_operators().order_by("name"), NODES_PER_PAGE).get_page(request.GET.get("page"))
    context = {"nodes": page, "page": page, "reclaim_grace_s": settings.RECLAIM_DEFAULT_GRACE_S}
    return render(request, "portal/operator/nodes.html", context)


@staff_required
def node_status(request, pk):
    node = get_object_or_404(Node.objects.select_related("pool"), pk=pk)
    form = NodeStatusForm(request.POST or None, initial={"status": node.status})
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            set_node_status(node, actor=request.user, **form.cleaned_data)
            messages.success(request, f"{node.name} is now {node.get_status_display().lower()}.")
            return redirect("operator_nodes")
    return _node_page(request, node, form)


@staff_required
@require_POST
def node_reclaim(request, pk):
    """Reclaim a spot node now (as a cloud notice would): its work checkpoints, stops and moves."""
    node = get_object_or_404(Node.objects.select_related("pool"), pk=pk)
    form = ReclaimForm(request.POST)
    if form.is_valid():
        deadline = timezone.now() + dt.timedelta(seconds=form.cleaned_data["grace_s"])
        with form.service_errors():
            stopping = reclaim_node(
                node,
                deadline=deadline,
                source="operator",
                notice_id=form.cleaned_data["notice_id"],
                actor=request.user,
            )
            messages.success(
                request,
                f"{node.name} reclaimed: {stopping} job(s) checkpoint and stop by {deadline:%H:%M:%S} UTC.",
            )
            return redirect("operator_node", pk=node.pk)
    return _node_page(
        request, node, NodeStatusForm(initial={"status": node.status}), reclaim=form, status=400
    )


@staff_required
@require_POST
def node_mig_layout(request, pk):
    node = get_object_or_404(Node.objects.select_related("pool"), pk=pk)
    form = MigLayoutForm(request.POST, node=node)
    if form.is_valid():
        gpu = node.gpus.get(index=form.cleaned_data["gpu_index"])
        with form.service_errors():
            set_mig_layout(gpu, form.cleaned_data["mig_layout"], actor=request.user)
            messages.success(request, f"{gpu} MIG layout: {gpu.mig_layout or 'none'}.")
            return redirect("operator_node", pk=node.pk)
    return _node_page(request, node, NodeStatusForm(initial={"status": node.status}), mig=form, status=400)


def _node_page(request, node, form, *, reclaim=None, mig=None, status=200):
    """The node's page: why it has its status, its cards and the work on them, its status form, the reclaim
    form on spot pools, the MIG form on MIG pools."""
    cards, slices = node_load(node)
    context = {
        "node": node,
        "cards": cards,
        "slices": slices,
        "status_event": status_event(node),
        "returns_by_itself": settings.NODE_RETURN_TO_SERVICE and lost_for_silence(node) is not None,
        "form": form,
        "reclaim": reclaim or ReclaimForm(initial={"grace_s": settings.RECLAIM_DEFAULT_GRACE_S}),
        "mig_form": (mig or MigLayoutForm(node=node)) if node.pool.mig_mode else None,
    }
    return render(request, "portal/operator/node_form.html", context, status=status)


@staff_required
@require_POST
def node_credential(request, pk):
    """Issue the node's agent a new credential and show it this once (the page is not cached)."""
    node = get_object_or_404(Node.objects.select_related("pool"), pk=pk)
    credential = reissue_agent_credential(node, actor=request.user)
    response = render(
        request, "portal/operator/node_credential.html", {"node": node, "credential": credential}
    )
    add_never_cache_headers(response)
    return response


@staff_required
def pool_edit(request, pk):
    pool = get_object_or_404(Pool, pk=pk)
    initial = {
        "description": pool.description,
        "granularity_milli": pool.granularity_milli,
        "mig_mode": pool.mig_mode,
        "consolidation": pool.consolidation,
    }
    form = PoolForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        changes = {name: form.cleaned_data[name] for name in form.changed_data}
        if not changes:
            messages.info(request, f"Nothing changed on {pool.name}.")
            return redirect("operator_pools")
        with form.service_errors():
            update_pool(pool, actor=request.user, **changes)
            messages.success(request, f"Pool {pool.name} updated.")
            return redirect("operator_pools")
    return render(request, "portal/operator/pool_form.html", {"pool": pool, "form": form})


@staff_required
def quota_index(request):
    form = QuotaForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            quota = set_team_quota(actor=request.user, **form.cleaned_data)
            said = f"{quota.team.name} is guaranteed {quota.guaranteed_milli} milli-GPU on {quota.pool.name}."
            messages.success(request, said)
            return redirect("operator_quotas")
    quotas = TeamQuota.objects.select_related("team", "pool")
    status = 400 if form.errors else 200
    return render(request, "portal/operator/quotas.html", {"form": form, "quotas": quotas}, status=status)


@staff_required
def identity_index(request):
    """Who jobs run as on the nodes: each team's Unix account and the users mapped to their own; the
    side forms map a team (here) or a user (identity_user)."""
    form = TeamUnixAccountForm(request.POST or None, prefix="team")
    if request.method == "POST" and form.is_valid():
        team = form.cleaned_data["team"]
        with form.service_errors():
            set_team_unix_account(team, unix_account=form.cleaned_data["unix_account"], actor=request.user)
            runs_as = (
                team.unix_account or f"{team.default_unix_account()}, the identity each node's agent creates"
            )
            messages.success(request, f"{team.name}'s jobs run as {runs_as}.")
            return redirect("operator_identities")
    return _identities_page(request, team_form=form)


@staff_required
@require_POST
def identity_user(request):
    form = UserUnixAccountForm(request.POST, prefix="user")
    if form.is_valid():
        user = form.cleaned_data["username"]
        with form.service_errors():
            mapped = set_user_unix_account(
                user, unix_account=form.cleaned_data["unix_account"], actor=request.user
            )
            runs_as = mapped or "their team's account"
            messages.success(request, f"{user.get_username()}'s jobs run as {runs_as} in every team.")
            return redirect("operator_identities")
    return _identities_page(request, user_form=form)


def _identities_page(request, *, team_form=None, user_form=None):
    context = {
        "teams": Team.objects.all(),
        "mappings": user_unix_accounts(),
        "team_form": team_form or TeamUnixAccountForm(prefix="team"),
        "user_form": user_form or UserUnixAccountForm(prefix="user"),
    }
    status = 400 if any(form.errors for form in (team_form, user_form) if form is not None) else 200
    return render(request, "portal/operator/identities.html", context, status=status)


RECENT_WHAT_IFS = 10


@staff_required
def what_if(request):
    """The scenario form and the latest runs; a started run opens its own page, which follows it."""
    form = WhatIfForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            run = start_what_if(actor=request.user, data=form.scenario())
            return redirect("operator_what_if_run", pk=run.pk)
    runs = WhatIfRun.objects.select_related("created_by")[:RECENT_WHAT_IFS]
    status = 400 if form.errors else 200
    return render(request, "portal/operator/what_if.html", {"form": form, "runs": runs}, status=status)


@staff_required
def what_if_run(request, pk):
    run = get_object_or_404(WhatIfRun.objects.select_related("created_by"), pk=pk)
    return render(request, "portal/operator/what_if_run.html", {"run": run})
