"""The scheduler's models (the event log is in audit, agent readings in telemetry), by subject."""

from scheduler_app.models.consolidation import RoomMove, RoomPlan
from scheduler_app.models.inventory import Gpu, Node, Pool, TeamQuota
from scheduler_app.models.requests import (
    Allocation,
    AllocationQuerySet,
    GpuRequest,
    GpuRequestQuerySet,
    LogChunk,
)
from scheduler_app.models.runs import PassRecord, WhatIfRun
from scheduler_app.models.sessions import InteractiveSession

__all__ = [
    "Allocation",
    "AllocationQuerySet",
    "Gpu",
    "GpuRequest",
    "GpuRequestQuerySet",
    "InteractiveSession",
    "LogChunk",
    "Node",
    "PassRecord",
    "Pool",
    "RoomMove",
    "RoomPlan",
    "TeamQuota",
    "WhatIfRun",
]
