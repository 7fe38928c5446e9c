"""The API's OpenAPI generator: drf-spectacular's, plus the Idempotency-Key header on each operation
whose handler takes it (infra.api.idempotency), so the schema lists exactly those."""

from django.conf import settings
from drf_spectacular import openapi
from drf_spectacular.utils import OpenApiParameter

from infra.api.idempotency import HEADER, KEY_RULE

IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    str,
    OpenApiParameter.HEADER,
    description=f"Names this write: a repeat with the same key and body gets the first answer and changes "
    f"nothing; the same key with another request, 422. {KEY_RULE} A key is kept at least "
    f"{settings.IDEMPOTENCY_KEY_TTL_S // 3600} hours.",
)


class AutoSchema(openapi.AutoSchema):
    def get_override_parameters(self):
        parameters = super().get_override_parameters()
        handler = getattr(self.view, getattr(self.view, "action", None) or self.method.lower(), None)
        if self.method == "POST" and getattr(handler, "takes_idempotency_key", False):
            return [*parameters, IDEMPOTENCY_KEY]
        return parameters
