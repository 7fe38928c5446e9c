"""The notices' pages; portal/urls.py includes them without a namespace, so the names are the project's."""

from django.urls import path

from audit import views

urlpatterns = [
    path("notices/<int:pk>/dismiss/", views.notice_dismiss, name="notice_dismiss"),
    path("notices/<int:pk>/acknowledge/", views.notice_acknowledge, name="notice_acknowledge"),
]
