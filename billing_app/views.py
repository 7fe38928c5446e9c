"""The billing pages: a team's budget (spend, forecast, burn-down, breakdowns; the admins set the budget),
its statement as CSV, switching a request's billing mode and accepting a resize from its page, the request
form's price lines, and the pricing page (the price in force per pool with its feed, the price history as a
chart, the on-demand/spot comparison for a request shape, and, for operators, a price file upload); the
operators' pools page with the price of each."""

import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from audit.choices import NoticeKind
from audit.notices import notices_for
from billing_app.budgets import set_budget
from billing_app.feeds import set_spot_feed, upload_prices
from billing_app.forms import (
    BillingSwitchForm,
    BudgetForm,
    PoolPriceForm,
    PriceUploadForm,
    QuoteForm,
    SpotFeedForm,
)
from billing_app.ledger import budget_view, parse_month, statement_csv, team_spend_at_a_glance
from billing_app.models import Budget
from billing_app.permissions import can_set_prices
from billing_app.quotes import quote, quote_lines
from billing_app.resizing import accept_resize
from billing_app.selectors import price_histories, price_per_hour, prices_in_force
from billing_app.services import set_pool_price
from billing_app.spot_feeds import PriceUploadError
from billing_app.switching import switch_billing_mode
from infra.messages import told
from scheduler_app.core.shares import Share
from scheduler_app.forms import RequestForm
from scheduler_app.live.streams import stream_paths
from scheduler_app.models import Pool
from scheduler_app.passes.estimates import price_lines
from scheduler_app.views.operator import staff_required
from scheduler_app.views.requests import _visible_request
from teams.permissions import can_manage_team
from teams.selectors import sole_team, teams_visible_to
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
    if team := sole_team(request.user, teams):
        return redirect("team_budget", slug=team.slug)
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
        with form.service_errors():
            set_budget(team, actor=request.user, **form.cleaned_data)
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
    done = f"{gpu_request.name} is billed {form.cleaned_data['billing_mode']} from now."
    with told(request, refused="Billing not switched", done=done):
        switch_billing_mode(gpu_request, user=request.user, **form.service_kwargs())
    return redirect("request_detail", pk=pk)


@login_required
@require_POST
def request_resize_accept(request, pk, offer_pk):
    gpu_request = _visible_request(request, pk)
    offer = get_object_or_404(gpu_request.resize_offers, pk=offer_pk)
    done = "Resize accepted: the scheduler applies it at the job's next checkpoint."
    with told(request, refused="Not accepted", done=done):
        accept_resize(offer, user=request.user)
    return redirect("request_detail", pk=pk)


@login_required
def request_new_prices(request):
    """The price block's lines for the share, pool and model in the query, as the form would show them
    before any estimate: the form asks for them when its estimate is refused (say, spot without a
    checkpoint interval yet), so the price still follows the share chosen."""
    form = RequestForm(request.GET, user=request.user)
    form.is_valid()  # the share, pool and model may be clean while the fields not sent are not
    return JsonResponse({"price_lines": form_price_lines(form)})


def form_price_lines(form: RequestForm) -> list[str]:
    """The price block before any script runs: the chosen share (or the form's initial one) per hour,
    on-demand against spot per GPU model (where it would run is the estimate's to say)."""
    data = getattr(form, "cleaned_data", {}) if form.is_bound else {}
    share = data.get("share") or Share.parse(form.fields["share"].initial)
    pool = Pool.objects.filter(name=data["pool"]).first() if data.get("pool") else None
    model = data.get("gpu_model") or None
    prices = price_per_hour(share.gpu_milli, share.num_gpus, gpu_model=model, pool=pool)
    return price_lines(prices, share.label)


@staff_required
def pool_prices(request):
    """The operators' pools page: the pools with the price in force of each; the side form prices a pool
    (from now or later)."""
    form = PoolPriceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            price = set_pool_price(actor=request.user, **form.cleaned_data)
            when = f"{price.effective_from:%Y-%m-%d %H:%M} UTC"
            messages.success(
                request, f"{price.pool.name} costs {price.usd_per_gpu_hour} USD/GPU-h from {when}."
            )
            return redirect("operator_pools")
    in_force = {price.pool_id: price for price in prices_in_force()}
    pools = [(pool, in_force.get(pool.pk)) for pool in Pool.objects.all()]
    status = 400 if form.errors else 200
    return render(request, "portal/operator/pools.html", {"pools": pools, "form": form}, status=status)


HISTORY_HOURS = (1, 6, 24, 24 * 7)


@login_required
def pricing(request):
    hours = _hours(request.GET.get("hours"))
    now = timezone.now()
    histories = price_histories(now - dt.timedelta(hours=hours), now)
    form = QuoteForm(request.GET if "gpu_model" in request.GET else None)
    compared = quote(**form.shape()) if form.is_bound and form.is_valid() else None
    upload = PriceUploadForm() if can_set_prices(request.user) else None
    return render(request, "portal/prices.html", _context(histories, hours, now, form, compared, upload))


@login_required
def pricing_upload(request):
    """POST only: write the file (all rows or none), or show the page again with one error per bad row."""
    if request.method != "POST" or not can_set_prices(request.user):
        return redirect("prices")
    upload = PriceUploadForm(request.POST, request.FILES)
    errors: list[str] = []
    if upload.is_valid():
        try:
            text = upload.cleaned_data["file"].read().decode("utf-8")
            rows = upload_prices(text, actor=request.user, pool=upload.cleaned_data["pool"])
        except UnicodeDecodeError:
            errors = ["The file is not UTF-8 text."]
        except PriceUploadError as error:
            errors = error.errors
        else:
            messages.success(request, f"{len(rows)} price(s) uploaded; nothing else changed.")
            return redirect("prices")
    return _page_again(request, upload, upload_errors=errors)


@login_required
def pricing_feed(request):
    """POST only (operators): set a spot pool's feed, or show the page again with the errors."""
    if request.method != "POST" or not can_set_prices(request.user):
        return redirect("prices")
    form = SpotFeedForm(request.POST)
    if form.is_valid():
        values = dict(form.cleaned_data)
        pool = values.pop("pool")
        with form.service_errors():
            set_spot_feed(pool, actor=request.user, **values)
            messages.success(request, f"{pool.name} now follows the {values['kind']} feed.")
            return redirect("prices")
    return _page_again(request, PriceUploadForm(), feed_form=form)


def _page_again(request, upload, **errors):
    """The page as it opens, with an operator form's errors (400): nothing was changed."""
    now = timezone.now()
    histories = price_histories(now - dt.timedelta(hours=24), now)
    context = _context(histories, 24, now, QuoteForm(), None, upload) | errors
    return render(request, "portal/prices.html", context, status=400)


def _context(histories, hours, now, form, compared, upload) -> dict:
    chart = [
        {
            "pool": h.pool,
            "kind": h.capacity_type,
            "x": [p[0] for p in h.points] + [now.isoformat()],
            "y": [p[1] for p in h.points] + ([h.points[-1][1]] if h.points else []),
        }
        for h in histories
    ]
    return {
        "histories": histories,
        "chart": chart,
        "hours": hours,
        "hour_choices": HISTORY_HOURS,
        "form": form,
        "quote": compared,
        "quote_lines": quote_lines(compared) if compared else [],
        "upload": upload,
        "feed_form": SpotFeedForm() if upload is not None else None,
    }


def _hours(text: str | None) -> int:
    try:
        hours = int(text or 24)
    except ValueError:
        return 24
    return hours if hours in HISTORY_HOURS else 24
