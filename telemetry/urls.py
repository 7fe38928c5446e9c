"""Telemetry's pages; portal/urls.py includes them without a namespace, so the names are the project's."""

from django.urls import path

from telemetry import views

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
]
