"""ASGI entry point: plain HTTP through Django's WSGI handler on threads (infra/http_threads.py), the
liveness probe on the event loop before them (portal.health.AnswersLiveness), JupyterLab's proxy on the
event loop (scheduler_app/live/lab.py), websockets through Channels. Served by uvicorn in production
and Daphne in the embedded default."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_wsgi_app = get_wsgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from infra.http_threads import WsgiOnThreads  # noqa: E402
from portal.health import AnswersLiveness  # noqa: E402
from portal.routing import LabOrDjango, websocket_urlpatterns  # noqa: E402
from scheduler_app.live.lab import lab_http  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": AnswersLiveness(
            LabOrDjango(
                AuthMiddlewareStack(lab_http), WsgiOnThreads(django_wsgi_app, threads=settings.HTTP_THREADS)
            )
        ),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
