from django.urls import path

from scheduler_app.live.consumers import ClusterConsumer, TeamEventsConsumer
from scheduler_app.live.sessions import AgentControlConsumer, AgentSessionConsumer, UserSessionConsumer

websocket_urlpatterns = [
    path("ws/teams/<slug:team_slug>/events/", TeamEventsConsumer.as_asgi()),
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/requests/<int:request_id>/session/", UserSessionConsumer.as_asgi()),
    path("ws/requests/<int:request_id>/port-forward/<int:port>/", UserSessionConsumer.as_asgi()),
    path("ws/agent/sessions/", AgentControlConsumer.as_asgi()),
    path("ws/agent/sessions/<uuid:key>/", AgentSessionConsumer.as_asgi()),
]
