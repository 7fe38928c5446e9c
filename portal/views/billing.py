"""A team's budget page (spend, forecast, burn-down, breakdowns; the admins set the budget), its
statement as CSV, and switching a request's billing mode from its page."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from audit.choices import NoticeKind
from audit.notices import notices_for
from billing_app.budgets import set_budget
from billing_app.ledger import budget_view, parse_month, statement_csv, team_spend_at_a_glance
from billing_app.models import Budget
from billing_app.switching import switch_billing_mode
from portal.forms import BillingSwitchForm, BudgetForm
from portal.live_streams import stream_paths
from portal.views.requests import REFUSALS, _say, _visible_request
from teams.permissions import can_manage_team
from teams.selectors import teams_visible_to
from teams.views import _visible_team


def _render_budget(request, team, form=None, status=200):
    budget = Budget.objects.filter(team=team, user__isnull=True).first()
    initial = {}
    if budget is not None:
        thresholds = ", ".join(str(t) for t in budget.thresholds_percent)
        initial = {"monthly_usd": budget.monthly_usd, "policy": budget.policy, "grace_s": budget.grace_s}
        initial["thresholds"] = thresholds
    view = budget_view(team)
    context = {
        "team": team,
        "view": view,
        "chart": {
            "days": [d["day"] for d in view.days],
            "spend": [str(d["spend_usd"]) for d in view.days],
            "budget": str(view.monthly_usd) if view.monthly_usd is not None else None,
            "forecast": str(view.forecast_usd),
            "month_end": view.month,
        },
        "can_manage": can_manage_team(request.user, team),
        "form": form or BudgetForm(initial=initial),
        "notices": notices_for(request.user, team=team, kind=NoticeKind.BUDGET),
        "streams": stream_paths(request.user, team),
    }
    return render(request, "portal/teams/budget.html", context, status=status)


@login_required
def budget_index(request):
    """Each team's spend this month against its budget (operators: every team's); a member of one team
    goes straight to its budget page."""
    teams = list(teams_visible_to(request.user))
    if len(teams) == 1 and not request.user.is_staff:
        return redirect("team_budget", slug=teams[0].slug)
    return render(request, "portal/teams/budgets.html", {"spend": team_spend_at_a_glance(teams)})


@login_required
def team_budget(request, slug):
    return _render_budget(request, _visible_team(request, slug))


@login_required
@require_POST
def team_budget_set(request, slug):
    team = _visible_team(request, slug)
    form = BudgetForm(request.POST)
    if form.is_valid():
        try:
            set_budget(team, actor=request.user, **form.cleaned_data)
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, "Budget saved.")
            return redirect("team_budget", slug=slug)
    return _render_budget(request, team, form=form, status=400)


@login_required
def team_statement_csv(request, slug):
    team = _visible_team(request, slug)
    try:
        month = parse_month(request.GET.get("month"))
    except ValueError as error:
        return HttpResponse(str(error), status=400, content_type="text/plain")
    response = HttpResponse(statement_csv(team, month), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{team.slug}-{month:%Y-%m}.csv"'
    return response


@login_required
@require_POST
def request_billing(request, pk):
    gpu_request = _visible_request(request, pk)
    form = BillingSwitchForm(request.POST)
    if not form.is_valid():
        problems = (f"{form[name].label}: {' '.join(errors)}" for name, errors in form.errors.items())
        messages.error(request, f"Billing not switched: {' '.join(problems)}")
        return redirect("request_detail", pk=pk)
    try:
        switch_billing_mode(gpu_request, user=request.user, **form.service_kwargs())
    except REFUSALS as refusal:
        messages.error(request, f"Billing not switched: {_say(refusal)}")
    else:
        messages.success(
            request, f"{gpu_request.name} is billed {form.cleaned_data['billing_mode']} from now."
        )
    return redirect("request_detail", pk=pk)
