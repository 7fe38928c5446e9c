"""Step *backfill*: once a request is blocked, later ones may still start (under ``QueueMode.backfill``),
but only where they do not delay the reservations held."""

from __future__ import annotations

from collections.abc import Mapping

from ..cluster import NodeState, RequestSpec
from .work import PassWork


def may_start(work: PassWork, first_blocked: RequestSpec | None) -> bool:
    """Whether the next request in line may try to start: always before the first blocked request,
    after it only with backfill."""
    return first_blocked is None or work.mode.backfill


def guarded_views(work: PassWork, request: RequestSpec) -> Mapping[str, NodeState]:
    """The nodes as a start of `request` must judge them so that no reservation held is delayed."""
    return work.book.guarded(work.by_name, work.book.end_of(request))
