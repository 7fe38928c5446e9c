from django.urls import path, re_path

from scheduler_app.live.consumers import ClusterConsumer, TeamEventsConsumer
from scheduler_app.live.lab import PATH as LAB_PATH
from scheduler_app.live.lab import LabWebsocketConsumer
from scheduler_app.live.sessions import AgentControlConsumer, AgentSessionConsumer, UserSessionConsumer

websocket_urlpatterns = [
    path("ws/teams/<slug:team_slug>/events/", TeamEventsConsumer.as_asgi()),
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/requests/<int:request_id>/session/", UserSessionConsumer.as_asgi()),
    path("ws/requests/<int:request_id>/port-forward/<int:port>/", UserSessionConsumer.as_asgi()),
    path("ws/agent/sessions/", AgentControlConsumer.as_asgi()),
    path("ws/agent/sessions/<uuid:key>/", AgentSessionConsumer.as_asgi()),
    path("ws/agent/sessions/<uuid:key>/<uuid:stream>/", AgentSessionConsumer.as_asgi()),
    re_path(r"^requests/(?P<request_id>\d+)/lab/", LabWebsocketConsumer.as_asgi()),
]


class LabOrDjango:
    """HTTP: JupyterLab's paths to its proxy (scheduler_app/live/lab.py), all else to `app` (Django;
    named as ASGI middleware names the application it wraps)."""

    def __init__(self, lab, app):
        self.lab, self.app = lab, app

    async def __call__(self, scope, receive, send):
        app = self.lab if scope["type"] == "http" and LAB_PATH.match(scope["path"]) else self.app
        return await app(scope, receive, send)
