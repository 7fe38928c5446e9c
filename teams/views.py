"""The teams' pages: a team's quota and use per pool, its members, secrets and notices (team admins
manage the members and the secrets), and personal API tokens (create: the secret is shown once, in the
answer to the POST; list; revoke).

The team page's quota and notices sections come from scheduler_app's and audit's inclusion tags, loaded
by its template: teams sits below both apps and imports neither.

The member actions say on the team's page what a service refused (its ValidationError); who may not
manage the team gets the 403 page (NotAllowed propagates), as from the API."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from infra.messages import told
from teams import services
from teams.choices import Role
from teams.forms import AddMemberForm, ApiTokenForm, IdlePolicyForm, RoleForm, TeamSecretForm
from teams.permissions import can_manage_secrets, can_manage_team, require
from teams.selectors import sole_team, team_members, team_secrets, teams_visible_to


def _visible_team(request, slug):
    """The team if the user is in it (or operates the platform); 404 otherwise, whether it exists or not."""
    return get_object_or_404(teams_visible_to(request.user), slug=slug)


def _visible_membership(request, slug, membership_id):
    """A membership of a team the user sees; 404 otherwise. It holds the team read here as its `team`."""
    team = _visible_team(request, slug)
    return get_object_or_404(team.memberships.select_related("user"), pk=membership_id)


def _render_team(request, team, add_form=None, secret_form=None, idle_form=None, status=200):
    context = {
        "team": team,
        "idle_minutes": team.idle_seconds() // 60,
        "default_idle_minutes": settings.TELEMETRY_IDLE_AFTER_S // 60,
        "idle_form": idle_form or _idle_form(team),
        "members": team_members(team),
        "can_manage": can_manage_team(request.user, team),
        "add_form": add_form or AddMemberForm(),
        "roles": RoleForm.base_fields["role"].choices,
        "secrets": team_secrets(team),
        "can_manage_secrets": can_manage_secrets(request.user, team),
        "secret_form": secret_form or TeamSecretForm(),
    }
    return render(request, "portal/teams/detail.html", context, status=status)


@login_required
def team_index(request):
    teams = list(teams_visible_to(request.user))
    if team := sole_team(request.user, teams):
        return redirect("team_detail", slug=team.slug)
    return render(request, "portal/teams/index.html", {"teams": teams})


@login_required
def team_detail(request, slug):
    return _render_team(request, _visible_team(request, slug))


@login_required
@require_POST
def member_add(request, slug):
    team = _visible_team(request, slug)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        with form.service_errors():
            services.add_member(team, actor=request.user, **form.cleaned_data)
            messages.success(request, f"{form.cleaned_data['username']} added to {team.name}.")
            return redirect("team_detail", slug=slug)
    return _render_team(request, team, add_form=form, status=400)


@login_required
@require_POST
def member_role(request, slug, membership_id):
    membership = _visible_membership(request, slug, membership_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Role not changed: {' '.join(form.errors['role'])}")
        return redirect("team_detail", slug=slug)
    done = f"{membership.user} is now {Role(form.cleaned_data['role']).label.lower()}."
    with told(request, refused="Role not changed", done=done, refusals=ValidationError):
        services.change_role(membership, actor=request.user, **form.cleaned_data)
    return redirect("team_detail", slug=slug)


@login_required
@require_POST
def member_remove(request, slug, membership_id):
    membership = _visible_membership(request, slug, membership_id)
    done = f"{membership.user} removed from {membership.team.name}."
    with told(request, refused="Not removed", done=done, refusals=ValidationError):
        services.remove_member(membership, actor=request.user)
    return redirect("team_detail", slug=slug)


@login_required
@require_POST
def secret_set(request, slug):
    """Team admins add or replace a secret; a refused one comes back with its name, never its value."""
    team = _visible_team(request, slug)
    form = TeamSecretForm(request.POST)
    if form.is_valid():
        with form.service_errors():
            _, created = services.set_team_secret(team, actor=request.user, **form.cleaned_data)
            done = "added" if created else "replaced"
            messages.success(
                request, f"Secret {form.cleaned_data['name']} {done}; jobs placed from now get it."
            )
            return redirect("team_detail", slug=slug)
    return _render_team(request, team, secret_form=form, status=400)


@login_required
@require_POST
def secret_delete(request, slug, name):
    team = _visible_team(request, slug)
    services.delete_team_secret(get_object_or_404(team_secrets(team), name=name), actor=request.user)
    messages.success(request, f"Secret {name} deleted.")
    return redirect("team_detail", slug=slug)


def _idle_form(team, data=None) -> IdlePolicyForm:
    initial = {
        "idle_minutes": team.idle_minutes,
        "idle_util_percent": team.idle_util_percent,
        "release": team.release_idle_allocations,
    }
    return IdlePolicyForm(data, initial=initial)


@login_required
@require_POST
def idle_policy(request, slug):
    team = _visible_team(request, slug)
    require(can_manage_team(request.user, team), f"Only team admins of {team.name} can set its policy.")
    form = _idle_form(team, request.POST)
    if form.is_valid():
        with form.service_errors():
            services.set_idle_policy(team, actor=request.user, **form.service_kwargs())
            messages.success(request, "Idle policy saved.")
            return redirect("team_detail", slug=slug)
    return _render_team(request, team, idle_form=form, status=400)


@login_required
def token_index(request):
    form = ApiTokenForm(request.POST or None)
    token = secret = None
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            token, secret = services.create_api_token(request.user, **form.service_kwargs())
            form = ApiTokenForm()
    context = {
        "form": form,
        "created": token,
        "secret": secret,
        "tokens": request.user.api_tokens.all(),
        "now": timezone.now(),
    }
    return render(request, "portal/tokens.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def token_revoke(request, pk):
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    services.revoke_api_token(token, user=request.user)
    messages.success(request, f"Token {token.name} revoked; it no longer works.")
    return redirect("tokens")
