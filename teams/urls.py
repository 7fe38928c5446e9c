"""The teams' pages; portal/urls.py includes them without a namespace, so the names are the project's."""

from django.urls import path

from teams import views

urlpatterns = [
    path("accounts/tokens/", views.token_index, name="tokens"),
    path("accounts/tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
    path("teams/", views.team_index, name="teams"),
    path("teams/<slug:slug>/", views.team_detail, name="team_detail"),
    path("teams/<slug:slug>/members/", views.member_add, name="member_add"),
    path("teams/<slug:slug>/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("teams/<slug:slug>/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path("teams/<slug:slug>/idle-policy/", views.idle_policy, name="team_idle_policy"),
    path("teams/<slug:slug>/secrets/", views.secret_set, name="team_secret_set"),
    path("teams/<slug:slug>/secrets/<str:name>/delete/", views.secret_delete, name="team_secret_delete"),
]
