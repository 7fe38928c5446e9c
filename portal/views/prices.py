"""The pricing page: the price in force per pool with its feed, the price history as a chart, the
on-demand/spot comparison for a request shape, and (operators) a price file upload."""

import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils import timezone

from billing_app.feeds import set_spot_feed, upload_prices
from billing_app.permissions import can_set_prices
from billing_app.quotes import quote, quote_lines
from billing_app.selectors import price_histories
from billing_app.spot_feeds import PriceUploadError
from portal.forms import PriceUploadForm, QuoteForm, SpotFeedForm

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
        try:
            set_spot_feed(pool, actor=request.user, **values)
        except ValidationError as error:
            form.add_service_errors(error)
        else:
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
