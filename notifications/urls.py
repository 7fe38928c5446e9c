"""The notification pages; portal/urls.py includes them without a namespace: the names are the project's."""

from django.urls import path

from notifications import views

urlpatterns = [
    path("accounts/notifications/", views.my_channels, name="my_channels"),
    path("teams/<slug:slug>/notifications/", views.team_channels, name="team_channels"),
    path("notifications/channels/<int:pk>/", views.channel_detail, name="channel_detail"),
    path("notifications/channels/<int:pk>/test/", views.channel_test, name="channel_test"),
    path("notifications/channels/<int:pk>/pause/", views.channel_pause, name="channel_pause"),
    path("notifications/channels/<int:pk>/resume/", views.channel_resume, name="channel_resume"),
    path(
        "notifications/channels/<int:pk>/rotate-secret/",
        views.channel_rotate_secret,
        name="channel_rotate_secret",
    ),
    path("notifications/channels/<int:pk>/delete/", views.channel_delete, name="channel_delete"),
]
