"""GPU Portal SDK: rent fractions of GPUs from Python, no Django needed.

from gpu_portal_sdk import ResourceManager
portal = ResourceManager("https://gpu.example.org", "gpp_…")
job = portal.request_allocation(min_gpu=0.5, wait=True, timeout_s=600)
"""

from gpu_portal_sdk.client import ResourceManager
from gpu_portal_sdk.errors import (
    AuthenticationError,
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
    Resource,
    Utilization,
    UtilizationPoint,
    UtilizationSummary,
)
from gpu_portal_sdk.version import __version__

__all__ = [
    "Allocation",
    "AuthenticationError",
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
    "RateLimitedError",
    "RequestFailedError",
    "Resource",
    "ResourceBusyError",
    "ResourceManager",
    "ServiceUnavailableError",
    "Utilization",
    "UtilizationPoint",
    "UtilizationSummary",
    "ValidationError",
    "__version__",
]
