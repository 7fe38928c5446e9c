"""The API's answer to a path it does not serve."""

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@permission_classes([])
def not_found(request):
    raise NotFound("No such API endpoint; see /api/v1/docs/.")
