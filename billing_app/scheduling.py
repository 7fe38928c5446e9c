"""Billing's answers to scheduling (scheduler_app.rules.billing.Billing), registered by
BillingAppConfig.ready(): scheduling never imports billing_app."""

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal

from billing_app.budgets import apply_budget_policy, budget_warning, on_demand_holds
from billing_app.invariants import billing_errors
from billing_app.models import CapacityMove
from billing_app.prices import NoPriceInForce, hourly_usd, price_in_force
from billing_app.quotes import quote, quote_lines
from billing_app.resizing import mark_resize_applied, resizes_to_apply
from billing_app.selectors import price_per_hour
from scheduler_app.choices import BillingMode
from scheduler_app.models import GpuRequest, Pool
from scheduler_app.rules.billing import EstimatePrice, Resize


class SchedulingBilling:
    """The budgets, prices, quotes, ledger check, capacity moves and resizes, as scheduling asks."""

    def admit(self, request: GpuRequest) -> None:
        apply_budget_policy(request)

    def holds(self, at: dt.datetime) -> dict[tuple[int, int | None], str]:
        return on_demand_holds(at)

    def estimate_price(
        self, request: GpuRequest, *, placed_pool: str, gpu_milli: int, at: dt.datetime
    ) -> EstimatePrice:
        """The quote is on the request's own share; the budget warning at the price where it would run,
        else at its billing mode's price on the compared model."""
        prices = price_per_hour(
            gpu_milli,
            request.num_gpus,
            gpu_model=request.gpu_model or None,
            pool=request.pool,
            at=at,
            placed_pool=placed_pool,
        )
        compared = prices.compared
        shape = None
        if compared.gpu_model:
            shape = quote(
                gpu_model=compared.gpu_model,
                at=at,
                gpu_milli=request.gpu_milli,
                num_gpus=request.num_gpus,
                max_duration_s=request.max_duration_s,
                checkpoint_interval_s=request.checkpoint_interval_s,
            )
        hourly = prices.placed
        if hourly is None:
            hourly = compared.spot if request.billing_mode == BillingMode.SPOT else compared.on_demand
        usd = hourly.usd_per_hour if hourly is not None else None
        warning = budget_warning(request.team_id, request.user_id, usd, request.max_duration_s, at=at)
        return EstimatePrice(prices, shape, tuple(quote_lines(shape)) if shape else (), warning)

    def gpu_hour_prices(self, pools: Iterable[Pool], at: dt.datetime) -> dict[str, Decimal]:
        priced = {}
        for pool in pools:
            try:
                priced[pool.name] = price_in_force(pool, pool.capacity_type, at)
            except NoPriceInForce:
                continue
        return priced

    def usd_per_hour(self, usd_per_gpu_hour: Decimal, gpu_milli: int, num_gpus: int) -> Decimal:
        return hourly_usd(usd_per_gpu_hour, gpu_milli, num_gpus)

    def violations(self, now: dt.datetime | None) -> list[str]:
        return billing_errors(now)

    def moves_due(self, request_ids: Iterable[int]) -> dict[int, str]:
        """A switch back to on-demand billing while on spot capacity first, then an accepted resize."""
        ids = list(request_ids)
        why: dict[int, str] = {}
        for request_id in CapacityMove.objects.filter(request_id__in=ids, done_at__isnull=True).values_list(
            "request_id", flat=True
        ):
            why.setdefault(request_id, "moved to on-demand capacity at its checkpoint, as asked")
        for request_id, to_milli in (
            resizes_to_apply().filter(request_id__in=ids).values_list("request_id", "to_milli")
        ):
            why.setdefault(request_id, f"resized to {to_milli} milli-GPU at its checkpoint, as accepted")
        return why

    def resizes_due(self, request_ids: Iterable[int]) -> dict[int, Resize]:
        return {offer.request_id: offer for offer in resizes_to_apply().filter(request__in=list(request_ids))}

    def requeued(self, request_ids: Iterable[int], resizes: Iterable[Resize], at: dt.datetime) -> None:
        """Their moves to on-demand capacity are done; the resizes (billing's offers) applied."""
        CapacityMove.objects.filter(request_id__in=list(request_ids), done_at__isnull=True).update(done_at=at)
        for offer in resizes:
            mark_resize_applied(offer, now=at)
