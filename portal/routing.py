from django.urls import path

from scheduler_app.live.consumers import ClusterConsumer, TeamEventsConsumer

websocket_urlpatterns = [
    path("ws/teams/<slug:team_slug>/events/", TeamEventsConsumer.as_asgi()),
    path("ws/cluster/", ClusterConsumer.as_asgi()),
]
