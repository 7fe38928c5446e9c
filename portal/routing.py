from django.urls import path

from scheduler_app.consumers import TeamEventsConsumer

websocket_urlpatterns = [
    path("ws/teams/<slug:team_slug>/events/", TeamEventsConsumer.as_asgi()),
]
