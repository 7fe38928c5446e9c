"""Reads of the ledger: entries, monthly statements, CSV export, and a team's spend against its budget.

Who sees what: a team's members see their team's; operators (staff) see every team's (teams_visible_to)."""

import csv
import datetime as dt
import io
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing_app.budgets import month_spend, percent_used
from billing_app.constants import CENT
from billing_app.metering import month_start, next_month
from billing_app.models import Budget, LedgerEntry
from billing_app.prices import price_book_at
from infra.echo import echoed
from infra.times import BadTime, in_range
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.models import Allocation
from teams.models import Team


def cents(value: Decimal | None) -> Decimal:
    return (value or Decimal(0)).quantize(CENT, rounding=ROUND_HALF_UP)


def parse_month(text: str | None, now: dt.datetime | None = None) -> dt.datetime:
    """'2026-03' -> that month's first instant (UTC); empty: this month. ValueError on anything else, and
    on a month outside infra.times' range (9999-12 has no next month to end it)."""
    if not text:
        return month_start(now or timezone.now())
    try:
        month = dt.datetime.strptime(text, "%Y-%m").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"{echoed(text)!r} is not a month; give it as YYYY-MM, such as 2026-03.") from None
    try:
        return in_range(month)
    except BadTime as problem:
        raise ValueError(f"{echoed(text)!r} {problem}.") from None


def month_entries(team: Team, month: dt.datetime, *, user_id: int | None = None) -> QuerySet[LedgerEntry]:
    entries = LedgerEntry.objects.filter(team=team, start__gte=month, start__lt=next_month(month))
    if user_id is not None:
        entries = entries.filter(user_id=user_id)
    return entries


@dataclass(frozen=True)
class Statement:
    """A team's (or one member's) month: the total and its breakdowns, USD rounded to cents."""

    team: str
    month: str
    user: str
    total_usd: Decimal
    gpu_hours: Decimal
    by_user: list[dict] = field(default_factory=list)
    by_pool: list[dict] = field(default_factory=list)
    by_billing_mode: list[dict] = field(default_factory=list)


def statement(team: Team, month: dt.datetime, *, user=None) -> Statement:
    entries = month_entries(team, month, user_id=user.pk if user is not None else None)

    def by(column: str, label: str) -> list[dict]:
        rows = entries.values(column).annotate(usd=Sum("amount_usd")).order_by(column)
        return [{label: row[column], "usd": cents(row["usd"])} for row in rows]

    totals = entries.aggregate(usd=Sum("amount_usd"))
    gpu_seconds = sum((e.milli * e.seconds for e in entries.only("milli", "seconds")), Decimal(0))
    return Statement(
        team=team.slug,
        month=f"{month:%Y-%m}",
        user=user.get_username() if user is not None else "",
        total_usd=cents(totals["usd"]),
        gpu_hours=(gpu_seconds / MILLI_PER_GPU / 3600).quantize(Decimal("0.001")),
        by_user=by("user__username", "user"),
        by_pool=by("pool__name", "pool"),
        by_billing_mode=by("billing_mode", "billing_mode"),
    )


CSV_COLUMNS = [
    "start", "end", "seconds", "team", "user", "request_id", "request", "pool", "billing_mode",
    "milli_gpu", "usd_per_gpu_hour", "amount_usd",
]  # fmt: skip


def statement_csv(team: Team, month: dt.datetime, *, user=None) -> str:
    """Every ledger entry of the month, one a row, amounts at full precision (they add up to the total)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    entries = month_entries(team, month, user_id=user.pk if user is not None else None)
    for e in entries.select_related("user", "request", "pool").order_by("start", "id"):
        writer.writerow([
            e.start.isoformat(), e.end.isoformat(), e.seconds, team.slug, e.user.get_username(), e.request_id,
            e.request.name, e.pool.name, e.billing_mode, e.milli, e.usd_per_gpu_hour, e.amount_usd,
        ])  # fmt: skip
    return out.getvalue()


@dataclass(frozen=True)
class BudgetView:
    """A team's month against its budget: spend so far, the current burn rate (USD an hour, from the
    work running now at today's prices), the month's forecast, and the burn-down per day."""

    team: str
    month: str
    monthly_usd: Decimal | None
    policy: str
    thresholds_percent: list
    spend_usd: Decimal
    burn_usd_per_hour: Decimal
    forecast_usd: Decimal
    percent_used: Decimal | None
    days: list[dict]
    statement: Statement


def burn_usd_per_hour(team: Team, now: dt.datetime) -> Decimal:
    """What the team's open slices cost an hour at the prices in force now, as metering would bill them
    (unrounded)."""
    total = Decimal(0)
    running = Allocation.objects.committed().filter(request__team=team).select_related("gpu__node__pool")
    book = price_book_at(now)
    for allocation in running:
        total += book.hourly_usd(allocation.gpu.node.pool, allocation.billing_mode, allocation.milli, now)
    return total


@dataclass(frozen=True)
class SpendNow:
    """A team's month so far, USD rounded to cents: spend, burn rate, forecast, and the team budget
    with its percent used (None without a budget)."""

    month: str
    spend_usd: Decimal
    burn_usd_per_hour: Decimal
    forecast_usd: Decimal
    monthly_usd: Decimal | None
    percent_used: Decimal | None


def spend_now(team: Team, now: dt.datetime, budget: Budget | None) -> SpendNow:
    """The budget page's figures at `now`, against `budget` (the team's, or None)."""
    spend = month_spend(team.pk, now)
    burn = burn_usd_per_hour(team, now)
    hours_left = Decimal((next_month(now) - now).total_seconds()) / 3600
    return SpendNow(
        month=f"{month_start(now):%Y-%m}",
        spend_usd=cents(spend),
        burn_usd_per_hour=cents(burn),
        forecast_usd=cents(spend + burn * hours_left),
        monthly_usd=budget.monthly_usd if budget else None,
        percent_used=percent_used(budget, spend) if budget else None,
    )


def spend_message(team: Team, now: dt.datetime) -> dict:
    """The team's spend as its live stream carries it after a metering run: the budget page's figures
    and today's point of its burn-down, nothing more (the page fetches its breakdowns itself)."""
    spend = spend_now(team, now, Budget.objects.filter(team=team, user__isnull=True).first())

    def text(value: Decimal | None) -> str | None:
        return None if value is None else str(value)

    return {
        "object": "spend",
        "team": team.slug,
        "month": spend.month,
        "day": now.astimezone(dt.UTC).date().isoformat(),
        "spend_usd": text(spend.spend_usd),
        "burn_usd_per_hour": text(spend.burn_usd_per_hour),
        "forecast_usd": text(spend.forecast_usd),
        "monthly_usd": text(spend.monthly_usd),
        "percent_used": text(spend.percent_used),
    }


def budget_view(team: Team, now: dt.datetime | None = None) -> BudgetView:
    now = now or timezone.now()
    month = month_start(now)
    budget = Budget.objects.filter(team=team, user__isnull=True).first()
    figures = spend_now(team, now, budget)
    daily = dict(
        month_entries(team, month)
        .annotate(day=TruncDate("start"))
        .values("day")
        .annotate(usd=Sum("amount_usd"))
        .values_list("day", "usd")
    )
    days, running = [], Decimal(0)
    day = month.date()
    while day <= now.date():
        running += daily.get(day) or Decimal(0)
        left = budget.monthly_usd - running if budget else None
        days.append(
            {"day": day.isoformat(), "spend_usd": cents(running), "left_usd": cents(left) if budget else None}
        )
        day += dt.timedelta(days=1)
    return BudgetView(
        team=team.slug,
        month=figures.month,
        monthly_usd=figures.monthly_usd,
        policy=budget.policy if budget else "",
        thresholds_percent=list(budget.thresholds_percent) if budget else [],
        spend_usd=figures.spend_usd,
        burn_usd_per_hour=figures.burn_usd_per_hour,
        forecast_usd=figures.forecast_usd,
        percent_used=figures.percent_used,
        days=days,
        statement=statement(team, month),
    )


@dataclass(frozen=True)
class TeamSpend:
    team: Team
    spend_usd: Decimal
    monthly_usd: Decimal | None
    percent_used: Decimal | None


def team_spend_at_a_glance(teams, now: dt.datetime | None = None) -> list[TeamSpend]:
    """Each team's spend this month against its budget, in two queries whatever the number of teams."""
    now = now or timezone.now()
    teams = list(teams)
    month = month_start(now)
    spent = dict(
        LedgerEntry.objects.filter(team__in=teams, start__gte=month, start__lt=next_month(now))
        .values("team_id")
        .annotate(usd=Sum("amount_usd"))
        .values_list("team_id", "usd")
    )
    budgets = dict(
        Budget.objects.filter(team__in=teams, user__isnull=True).values_list("team_id", "monthly_usd")
    )
    rows = []
    for team in teams:
        spend, budget = spent.get(team.pk) or Decimal(0), budgets.get(team.pk)
        percent = (spend * 100 / budget).quantize(Decimal("0.1")) if budget else None
        rows.append(TeamSpend(team, cents(spend), budget, percent))
    return rows
