"""The billing pages; portal/urls.py includes them without a namespace, so the names are the project's."""

from django.urls import path

from billing_app import views

urlpatterns = [
    path("prices/", views.pricing, name="prices"),
    path("prices/upload/", views.pricing_upload, name="prices_upload"),
    path("prices/feed/", views.pricing_feed, name="prices_feed"),
    path("budgets/", views.budget_index, name="budgets"),
    path("teams/<slug:slug>/budget/", views.team_budget, name="team_budget"),
    path("teams/<slug:slug>/budget/set/", views.team_budget_set, name="team_budget_set"),
    path("teams/<slug:slug>/statement.csv", views.team_statement_csv, name="team_statement_csv"),
    path("requests/new/prices/", views.request_new_prices, name="request_new_prices"),
    path("requests/<int:pk>/billing/", views.request_billing, name="request_billing"),
    path(
        "requests/<int:pk>/resize/<int:offer_pk>/accept/",
        views.request_resize_accept,
        name="request_resize_accept",
    ),
    path("operator/pools/", views.pool_prices, name="operator_pools"),
]
