"""Request a GPU, see an estimate before submitting, list and follow one's requests, cancel or release."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from billing_app.api.serializers import HourlyPricesSerializer
from billing_app.selectors import HourlyPrices, price_per_hour
from portal.forms import SHARE_CHOICES, RequestFilterForm, RequestForm
from portal.models import Team
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.estimates import estimate_request
from scheduler_app.lifecycle import IllegalTransition
from scheduler_app.models import Pool
from scheduler_app.selectors import request_events, request_list, request_segments, requests_visible_to
from scheduler_app.services import cancel_request, release_request, submit_request

PAGE_SIZE = 25
REFUSALS = (PermissionError, ValidationError, IllegalTransition)


@login_required
def request_new(request):
    form = RequestForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            gpu_request = submit_request(user=request.user, **form.service_kwargs())
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, f"{gpu_request.name} submitted; it is pending a scheduling pass.")
            return redirect("request_detail", pk=gpu_request.pk)
    share, prices = _form_prices(form)
    context = {"form": form, "price_text": price_text(prices, share), "price_pools": price_pools(prices)}
    return render(request, "portal/requests/new.html", context)


def _form_prices(form: RequestForm) -> tuple[int, HourlyPrices]:
    """The price block before any script runs: the chosen share (or the form's initial one) per hour."""
    data = getattr(form, "cleaned_data", {}) if form.is_bound else {}
    share = data.get("share") or form.fields["share"].initial
    whole = share > MILLI_PER_GPU
    pool = Pool.objects.filter(name=data["pool"]).first() if data.get("pool") else None
    prices = price_per_hour(
        MILLI_PER_GPU if whole else share,
        share // MILLI_PER_GPU if whole else 1,
        gpu_model=data.get("gpu_model") or None,
        pool=pool,
    )
    return share, prices


def price_text(prices: HourlyPrices, share: int) -> str:
    """'For 1/4 GPU: On-demand $1.19/h · Spot $0.33/h (save 72 %)'; an unpriced side says so."""
    head = f"For {dict(SHARE_CHOICES).get(share, f'{share} milli-GPU')}: "
    if prices.on_demand is None and prices.spot is None:
        return head + "no pool that matches is priced yet."
    on_demand = f"${prices.on_demand.usd_per_hour}/h" if prices.on_demand else "not priced"
    spot = f"${prices.spot.usd_per_hour}/h" if prices.spot else "not priced"
    text = f"{head}On-demand {on_demand} · Spot {spot}"
    saving = prices.spot_saving_percent
    if saving is None:
        return text
    if saving > 0:
        return f"{text} (save {saving} %)"
    return f"{text} (spot costs {-saving} % more)" if saving < 0 else f"{text} (same price)"


def price_pools(prices: HourlyPrices) -> str:
    """Which pools the prices are for."""
    pools = [
        f"{kind} {quote.pool} ({quote.gpu_model})"
        for kind, quote in (("on-demand", prices.on_demand), ("spot", prices.spot))
        if quote is not None
    ]
    return f"USD per hour for the whole request, cheapest matching pool: {', '.join(pools)}." if pools else ""


@login_required
@require_GET
def request_estimate(request):
    """Where the form's request would run now, or when it would start; the form's errors otherwise."""
    form = RequestForm(request.GET, user=request.user)
    if form.is_valid():
        # The name does not change where a request runs: do not nag about it before it is typed.
        fields = form.service_kwargs() | {"name": form.cleaned_data["name"].strip() or "unnamed"}
        try:
            estimate = estimate_request(user=request.user, **fields)
        except ValidationError as error:
            form.add_service_errors(error)
    if form.errors:
        # The price still follows the share while other fields are being fixed.
        share, prices = _form_prices(form)
        return JsonResponse(
            {
                "ok": False,
                "errors": form.service_error_dict(),
                "price_text": price_text(prices, share),
                "price_pools": price_pools(prices),
            }
        )
    start = estimate.estimated_start_at
    return JsonResponse(
        {
            "ok": True,
            "starts_now": estimate.starts_now,
            "where": estimate.where,
            "estimated_start_at": start.isoformat() if start else None,
            "reason": estimate.reason,
            "prices": HourlyPricesSerializer(estimate.prices).data,
            "price_text": price_text(estimate.prices, form.cleaned_data["share"]),
            "price_pools": price_pools(estimate.prices),
        }
    )


@login_required
def request_index(request):
    teams = Team.objects.filter(memberships__user=request.user)
    filters = RequestFilterForm(request.GET, teams=teams)
    requests = request_list(request.user, **filters.filters())
    page = Paginator(requests, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "portal/requests/index.html", {"filters": filters, "page": page})


def _visible_request(request, pk):
    """The request if the user's teams own it (or they operate the platform); 404 otherwise."""
    return get_object_or_404(requests_visible_to(request.user).select_related("team", "pool", "user"), pk=pk)


@login_required
def request_detail(request, pk):
    gpu_request = _visible_request(request, pk)
    context = {
        "r": gpu_request,
        "events": request_events(gpu_request),
        "segments": request_segments(gpu_request),
    }
    return render(request, "portal/requests/detail.html", context)


@login_required
@require_POST
def request_cancel(request, pk):
    gpu_request = _visible_request(request, pk)
    try:
        cancel_request(gpu_request, user=request.user)
    except REFUSALS as refusal:
        messages.error(request, f"Not cancelled: {_say(refusal)}")
    else:
        messages.success(request, f"{gpu_request.name} cancelled.")
    return redirect("request_detail", pk=pk)


@login_required
@require_POST
def request_release(request, pk):
    gpu_request = _visible_request(request, pk)
    try:
        release_request(gpu_request, user=request.user)
    except REFUSALS as refusal:
        messages.error(request, f"Not released: {_say(refusal)}")
    else:
        messages.success(request, f"{gpu_request.name} released; its GPUs are free again.")
    return redirect("request_detail", pk=pk)


def _say(refusal: Exception) -> str:
    return " ".join(refusal.messages) if isinstance(refusal, ValidationError) else str(refusal)
