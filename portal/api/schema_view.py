"""The view that serves the OpenAPI schema (its generator: infra.api.schema, which drf-spectacular's
views import, hence a module of its own)."""

import threading

from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response


class SchemaView(SpectacularAPIView):
    """This API's OpenAPI 3 schema: YAML (application/vnd.oai.openapi) or JSON
    (application/vnd.oai.openapi+json), chosen by the Accept header or ?format=yaml|json."""

    # Built once per process (per API version and language), then served as built: it is the same for
    # every caller (served public) and changes only with the code. Built by one thread at a time: a
    # process's first build resolves drf-spectacular's optional extensions (dj_rest_auth and others,
    # mostly not installed) into attributes their classes share; first builds running at once read one
    # another's half-done work (AttributeError): most of the calls right after a restart answered 500.
    _building = threading.Lock()
    _built: dict[tuple[str | None, str | None], dict] = {}

    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, translation.get_language())
        with self._building:
            if key not in self._built:
                self._built[key] = super()._get_schema_response(request).data
        filename = self._get_filename(request, version)  # its suffix follows the format asked for
        headers = {"Content-Disposition": f'inline; filename="{filename}"'}
        return Response(data=self._built[key], headers=headers)
