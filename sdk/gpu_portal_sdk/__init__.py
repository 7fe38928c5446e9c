"""GPU Portal SDK: rent fractions of GPUs from Python, no Django needed.

from gpu_portal_sdk import ResourceManager
portal = ResourceManager()  # GPU_PORTAL_URL / GPU_PORTAL_TOKEN, or what `gpu-portal login` saved
job = portal.request_allocation(task_type="training", min_gpu=0.5, prefer_spot=True)  # waits up to 60 s
print(portal.get_utilization(job.resource_id).gpu_util)
portal.release(job.resource_id)

Inside a job: `gpu_portal_sdk.checkpointed()` after each checkpoint written to $GPU_PORTAL_CHECKPOINT_DIR.
"""

from gpu_portal_sdk.checkpoint import checkpointed
from gpu_portal_sdk.client import ResourceManager
from gpu_portal_sdk.errors import (
    AlreadyEndedError,
    AuthenticationError,
    ConfigurationError,
    ConflictError,
    ConnectionFailedError,
    NotFoundError,
    PermissionDeniedError,
    PortalError,
    RateLimitedError,
    RequestFailedError,
    ResourceBusyError,
    ServiceUnavailableError,
    ValidationError,
)
from gpu_portal_sdk.models import (
    Allocation,
    Estimate,
    EstimatePrices,
    Event,
    GpuSample,
    GpuUtilization,
    Health,
    HourlyPrice,
    NodeHealth,
    Price,
    Quote,
    QuoteSide,
    Resource,
    SpotCost,
    Statement,
    Team,
    Utilization,
    UtilizationPoint,
    UtilizationSummary,
)
from gpu_portal_sdk.version import __version__

__all__ = [
    "Allocation",
    "AlreadyEndedError",
    "AuthenticationError",
    "ConfigurationError",
    "ConflictError",
    "ConnectionFailedError",
    "Estimate",
    "EstimatePrices",
    "Event",
    "GpuSample",
    "GpuUtilization",
    "Health",
    "HourlyPrice",
    "NodeHealth",
    "NotFoundError",
    "PermissionDeniedError",
    "PortalError",
    "Price",
    "Quote",
    "QuoteSide",
    "RateLimitedError",
    "RequestFailedError",
    "Resource",
    "ResourceBusyError",
    "ResourceManager",
    "ServiceUnavailableError",
    "SpotCost",
    "Statement",
    "Team",
    "Utilization",
    "UtilizationPoint",
    "UtilizationSummary",
    "ValidationError",
    "__version__",
    "checkpointed",
]
