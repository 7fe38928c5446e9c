"""Team budgets: setting them, alerting once per threshold and month, and the 100 % policy.

Spend is what the ledger holds for the month (metered time, a settle interval behind now)."""

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from audit.choices import NoticeKind
from audit.events import log_event
from audit.models import Notice
from audit.notices import notice_message
from billing_app.choices import BudgetPolicy
from billing_app.constants import CENT, DEFAULT_BUDGET_THRESHOLDS_PERCENT
from billing_app.metering import month_start, next_month
from billing_app.models import Budget, BudgetCrossing, LedgerEntry
from billing_app.prices import period_usd
from infra.live import publish_after_commit
from scheduler_app.choices import BillingMode, RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.transitions import transition_requests
from teams.choices import Role
from teams.models import Membership, Team
from teams.permissions import can_manage_team, require

BUDGET_ACTOR = "budget"


def set_budget(
    team: Team,
    *,
    actor,
    monthly_usd,
    user=None,
    thresholds_percent=DEFAULT_BUDGET_THRESHOLDS_PERCENT,
    policy: str = BudgetPolicy.ALERT_ONLY,
    grace_s: int = 3600,
) -> Budget:
    """Set the team's monthly budget (a member's when `user` is given); team admins and operators only."""
    require(can_manage_team(actor, team), "Only the team's admins set its budget.")
    errors = {}
    try:
        amount = Decimal(str(monthly_usd)) if not isinstance(monthly_usd, float) else None
    except ArithmeticError:
        amount = None
    if amount is None or not amount.is_finite() or amount <= 0 or amount >= Decimal("1e10"):
        errors["monthly_usd"] = "Give a budget above 0 USD as a decimal string, such as '500.00'."
    elif -amount.as_tuple().exponent > 2:
        errors["monthly_usd"] = "A budget is in whole cents: at most 2 decimal places."
    thresholds = list(thresholds_percent) if isinstance(thresholds_percent, list | tuple) else []
    if not thresholds or any(
        not isinstance(t, int) or isinstance(t, bool) or not 1 <= t <= 1000 for t in thresholds
    ):
        errors["thresholds_percent"] = "Give whole percentages from 1 to 1000, such as [50, 80, 100]."
    else:
        thresholds = sorted(set(thresholds))
    if policy not in BudgetPolicy.values:
        errors["policy"] = f"Choose one of: {', '.join(BudgetPolicy.values)}."
    if not isinstance(grace_s, int) or isinstance(grace_s, bool) or grace_s < 0:
        errors["grace_s"] = "The grace period is a whole number of seconds, 0 or more."
    if user is not None and not Membership.objects.filter(team=team, user=user).exists():
        errors["user"] = f"{user.get_username()} is not a member of team {team.name}."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        Team.objects.select_for_update().get(pk=team.pk)
        budget, _ = Budget.objects.update_or_create(
            team=team,
            user=user,
            defaults={
                "monthly_usd": amount.quantize(CENT),
                "thresholds_percent": thresholds,
                "policy": policy,
                "grace_s": grace_s,
            },
        )
        log_event(
            budget,
            "budget_set",
            actor=actor,
            team=team,
            reason=f"{budget.monthly_usd} USD a month, alerts at {thresholds} %, at 100 %: {policy}",
            data={"monthly_usd": str(budget.monthly_usd), "policy": policy},
        )
    return budget


def month_spend(team_id: int, at: dt.datetime, *, user_id: int | None = None) -> Decimal:
    """The team's (or one member's) ledger total for the month holding `at`, in USD."""
    entries = LedgerEntry.objects.filter(
        team_id=team_id, start__gte=month_start(at), start__lt=next_month(at)
    )
    if user_id is not None:
        entries = entries.filter(user_id=user_id)
    return entries.aggregate(total=Sum("amount_usd"))["total"] or Decimal(0)


def percent_used(budget: Budget, spend: Decimal) -> Decimal:
    return (spend * 100 / budget.monthly_usd).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def exhausted_budget(team_id: int, user_id: int | None, at: dt.datetime) -> Budget | None:
    """The team's budget, or else the user's own, that is spent to 100 % this month; None otherwise."""
    budgets = Budget.objects.filter(team_id=team_id).order_by("user_id")  # the team's (null user) first
    for budget in budgets:
        if budget.user_id is not None and budget.user_id != user_id:
            continue
        if month_spend(team_id, at, user_id=budget.user_id) >= budget.monthly_usd:
            return budget
    return None


def _whose(budget: Budget) -> str:
    """The budget as a message names it: "bob's budget" or "team Vision's budget"."""
    return f"{budget.user.get_username()}'s budget" if budget.user_id else f"team {budget.team.name}'s budget"


def on_demand_holds(at: dt.datetime) -> dict[tuple[int, int | None], str]:
    """For the scheduler: {(team id, user id or None for the whole team): why} for each spent budget
    whose policy blocks on-demand work; its pending on-demand requests wait with that reason."""
    holds = {}
    for budget in Budget.objects.filter(policy=BudgetPolicy.BLOCK_ON_DEMAND).select_related("team", "user"):
        if month_spend(budget.team_id, at, user_id=budget.user_id) >= budget.monthly_usd:
            holds[budget.team_id, budget.user_id] = (
                f"{_whose(budget)} of {budget.monthly_usd} USD is spent for {at:%B %Y}: on-demand work "
                "waits until the budget is raised or the month ends (spot work may run)"
            )
    return holds


def apply_budget_policy(request: GpuRequest, at: dt.datetime | None = None) -> None:
    """The submit path's check: once a budget is spent, its policy blocks new on-demand work or turns
    it into spot work (ValidationError naming billing_mode when it cannot); stop_running lets new work
    in, since the running work stops after the grace period anyway."""
    at = at or timezone.now()
    if request.billing_mode != BillingMode.ON_DEMAND:
        return
    budget = exhausted_budget(request.team_id, request.user_id, at)
    if budget is None:
        return
    whose = _whose(budget)
    if budget.policy == BudgetPolicy.BLOCK_ON_DEMAND:
        raise ValidationError(
            {
                "billing_mode": f"{whose} of {budget.monthly_usd} USD is spent for this month: "
                "new on-demand requests are blocked; choose spot billing."
            }
        )
    if budget.policy == BudgetPolicy.SWITCH_TO_SPOT:
        if request.pool_id and not request.pool.is_spot():
            raise ValidationError(
                {
                    "pool": f"{whose} is spent: new requests run on spot, "
                    f"and pool {request.pool.name} is on-demand."
                }
            )
        if not request.checkpoint_interval_s:
            raise ValidationError(
                {
                    "checkpoint_interval_s": f"{whose} is spent: new requests run on spot, "
                    "which needs a checkpoint interval."
                }
            )
        request.billing_mode = BillingMode.SPOT


def budget_warning(team_id: int, user_id: int, usd_per_hour: Decimal | None, max_duration_s, at=None) -> str:
    """Before submitting: what the request would cost over its max duration if that exceeds what is left
    of the team's (or the user's) budget this month; "" when it fits or cannot be told."""
    if usd_per_hour is None or not max_duration_s:
        return ""
    at = at or timezone.now()
    cost = period_usd(usd_per_hour, max_duration_s).quantize(CENT, rounding=ROUND_HALF_UP)
    for budget in Budget.objects.filter(team_id=team_id).order_by("user_id"):
        if budget.user_id is not None and budget.user_id != user_id:
            continue
        left = budget.monthly_usd - month_spend(team_id, at, user_id=budget.user_id)
        if cost > left:
            whose = "your budget" if budget.user_id else "the team's budget"
            return (
                f"Over its max duration this request may cost {cost} USD; "
                f"{max(left, Decimal(0)).quantize(CENT)} USD is left of {whose} "
                f"of {budget.monthly_usd} USD this month."
            )
    return ""


def check_budgets(now: dt.datetime | None = None) -> list[BudgetCrossing]:
    """Raise each threshold crossed this month that has not been raised yet, then apply stop_running
    to budgets whose grace period after 100 % has passed. Returns the crossings raised now."""
    now = now or timezone.now()
    month = month_start(now).date()
    raised = []
    for budget in Budget.objects.select_related("team", "user"):
        spend = month_spend(budget.team_id, now, user_id=budget.user_id)
        done = set(budget.crossings.filter(month=month).values_list("threshold_percent", flat=True))
        for threshold in sorted(set(budget.thresholds_percent) | {100}):
            if threshold in done or spend * 100 < budget.monthly_usd * threshold:
                continue
            crossing = _raise_crossing(budget, month, threshold, spend, now)
            if crossing is not None:
                raised.append(crossing)
        if budget.policy == BudgetPolicy.STOP_RUNNING:
            _stop_after_grace(budget, month, now)
    return raised


def _raise_crossing(budget: Budget, month, threshold: int, spend: Decimal, now) -> BudgetCrossing | None:
    """One crossing: its row (unique per budget, month and threshold), an Event, a notice, a live
    message and an email; a concurrent check that raised it first wins and this one writes nothing."""
    whose = _whose(budget)
    text = (
        f"{whose[0].upper()}{whose[1:]} for {month:%B %Y} is {percent_used(budget, spend)} % spent "
        f"({spend.quantize(CENT)} of {budget.monthly_usd} USD): past {threshold} %."
    )
    if threshold >= 100 and budget.policy != BudgetPolicy.ALERT_ONLY:
        text += f" Now: {BudgetPolicy(budget.policy).label.lower()}."
    try:
        with transaction.atomic():
            crossing = BudgetCrossing.objects.create(
                budget=budget, month=month, threshold_percent=threshold, spend_usd=spend, crossed_at=now
            )
            data = {
                "threshold_percent": threshold,
                "spend_usd": str(spend.quantize(CENT)),
                "monthly_usd": str(budget.monthly_usd),
                "month": f"{month:%Y-%m}",
            }
            log_event(
                budget, "budget_crossed", actor_name=BUDGET_ACTOR, team=budget.team, reason=text, data=data
            )
            notice = Notice.objects.create(
                team=budget.team,
                kind=NoticeKind.BUDGET,
                key=f"budget:{budget.pk}:{month:%Y-%m}:{threshold}",
                text=text[:500],
                data=data,
                created_at=now,
            )
            publish_after_commit(budget.team_id, notice_message(notice))
    except IntegrityError:
        return None
    transaction.on_commit(lambda: _email(budget, text))
    return crossing


def _email(budget: Budget, text: str) -> None:
    """To the budget's member, or to the team's admins; a mail server being away loses only the mail."""
    if budget.user_id:
        to = [budget.user.email]
    else:
        to = list(
            Membership.objects.filter(team=budget.team, role=Role.TEAM_ADMIN).values_list(
                "user__email", flat=True
            )
        )
    to = [address for address in to if address]
    if to:
        send_mail(
            f"[GPU Portal] {budget.team.name}: budget alert",
            text,
            settings.DEFAULT_FROM_EMAIL,
            to,
            fail_silently=True,
        )


def _stop_after_grace(budget: Budget, month, now) -> None:
    crossing = budget.crossings.filter(month=month, threshold_percent__gte=100).order_by("crossed_at").first()
    if crossing is None or now < crossing.crossed_at + dt.timedelta(seconds=budget.grace_s):
        return
    active = GpuRequest.objects.filter(team_id=budget.team_id, state__in=ACTIVE_STATES)
    if budget.user_id:
        active = active.filter(user_id=budget.user_id)
    ids = list(active.values_list("pk", flat=True))
    if ids:
        transition_requests(
            ids,
            RequestState.CANCELLED,
            from_states=ACTIVE_STATES,
            actor_name=BUDGET_ACTOR,
            reason=f"stopped: the budget of {budget.monthly_usd} USD for {month:%B %Y} is spent and its "
            f"grace period of {budget.grace_s} s is over",
        )
