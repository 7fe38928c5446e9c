"""What scheduling asks of billing: its admission rules (budgets that refuse or hold on-demand work),
the price and quote an estimate shows, what what-if's cards cost, billing's own invariants, and the
moves and resizes billing asks for at a checkpoint.

Dependencies run one way: billing_app reads scheduling, and scheduling reaches billing only through
the `Billing` registered here by `BillingAppConfig.ready()` (billing_app/scheduling.py). With none
registered, `billing()` fails loudly rather than admit unbudgeted work or show no price: billing_app
is always installed.
"""

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured

from scheduler_app.models import GpuRequest, Pool


class HourlyPrice(Protocol):
    """What a request costs an hour in one pool: USD rounded to cents, and unrounded."""

    pool: str
    gpu_model: str
    usd_per_hour: Decimal
    exact_usd_per_hour: Decimal


class ModelPrices(Protocol):
    """On-demand against spot for one GPU model (None where unpriced)."""

    gpu_model: str
    on_demand: HourlyPrice | None
    spot: HourlyPrice | None
    spot_saving_percent: int | None


class PlacementPrices(Protocol):
    """The price where a request would run (None: not placed, or unpriced), and on-demand against spot
    per GPU model it allows; `compared`: the placement's model, or the only one allowed."""

    placed: HourlyPrice | None
    by_model: Sequence[ModelPrices]
    compared: ModelPrices


@dataclass(frozen=True)
class EstimatePrice:
    """What billing says of a request placed in a pool: its prices, the quote on the compared model
    (billing's, shown by its API serializer; None when no model is known) and that quote in words,
    and a warning when it could exceed what is left of a budget ("" otherwise)."""

    prices: PlacementPrices
    quote: object | None
    quote_lines: tuple[str, ...]
    budget_warning: str


class Resize(Protocol):
    """A resize the request's team accepted: its share per card before and after, in milli-GPU."""

    from_milli: int
    to_milli: int


class Billing(Protocol):
    """Billing's answers to scheduling; billing_app/scheduling.py gives them."""

    def admit(self, request: GpuRequest) -> None:
        """The submit path's budget check on an unsaved request: ValidationError naming the field when a
        spent budget refuses it; it may turn on-demand work into spot work."""

    def holds(self, at: dt.datetime) -> dict[tuple[int, int | None], str]:
        """{(team id, user id or None for the whole team): why} for each spent budget whose pending
        on-demand work waits."""

    def estimate_price(
        self, request: GpuRequest, *, placed_pool: str, gpu_milli: int, at: dt.datetime
    ) -> EstimatePrice:
        """The request's price with gpu_milli per card in `placed_pool` ("" where not placed)."""

    def gpu_hour_prices(self, pools: Iterable[Pool], at: dt.datetime) -> dict[str, Decimal]:
        """Pool name -> USD per whole GPU-hour in force at `at`, for the pools priced then."""

    def usd_per_hour(self, usd_per_gpu_hour: Decimal, gpu_milli: int, num_gpus: int) -> Decimal:
        """USD an hour, unrounded, for gpu_milli on each of num_gpus cards, no share premium."""

    def violations(self, now: dt.datetime | None) -> list[str]:
        """Billing's broken invariants as of `now`, in words (empty when all hold)."""

    def moves_due(self, request_ids: Iterable[int]) -> dict[int, str]:
        """Per request billing wants moved at its next checkpoint: why."""

    def resizes_due(self, request_ids: Iterable[int]) -> dict[int, Resize]:
        """Per request: the accepted resize to apply when it is next placed."""

    def requeued(self, request_ids: Iterable[int], resizes: Iterable[Resize], at: dt.datetime) -> None:
        """The requests were requeued at `at`, to be placed again with `resizes` applied."""


_billing: Billing | None = None


def register_billing(implementation: Billing) -> None:
    """Billing's answers from now on (BillingAppConfig.ready() calls this once per process)."""
    global _billing
    _billing = implementation


def billing() -> Billing:
    """The registered billing; ImproperlyConfigured when billing_app has not registered one."""
    if _billing is None:
        raise ImproperlyConfigured(
            "No billing registered for scheduling: billing_app registers it in BillingAppConfig.ready()."
        )
    return _billing
