"""The view that serves the OpenAPI schema (its generator: infra.api.schema, which drf-spectacular's
views import, hence a module of its own)."""

import threading

from drf_spectacular.views import SpectacularAPIView


class SchemaView(SpectacularAPIView):
    """The schema, built by one thread at a time. A process's first build resolves drf-spectacular's
    optional extensions (dj_rest_auth and others, mostly not installed) into attributes their classes
    share; first builds running at once read one another's half-done work (AttributeError): most of the
    calls right after a restart answered 500."""

    _building = threading.Lock()

    def _get_schema_response(self, request):
        with self._building:
            return super()._get_schema_response(request)
