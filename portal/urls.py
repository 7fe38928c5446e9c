from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal.auth_forms import SignInForm
from portal.views import billing, cluster, general, metrics, operator, prices, requests

urlpatterns = [
    # First: the API (clients and node agents) serves most calls, and Django tries the patterns in order.
    path("api/v1/", include(("portal.api.urls", "api"))),
    path("", general.home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("healthz/live", general.health_live, name="health_live"),
    path("healthz/ready", general.health_ready, name="health_ready"),
    path("metrics", metrics.metrics, name="metrics"),
    path("requests/", requests.request_index, name="requests"),
    path("requests/new/", requests.request_new, name="request_new"),
    path("requests/new/prices/", requests.request_new_prices, name="request_new_prices"),
    path("requests/<int:pk>/", requests.request_detail, name="request_detail"),
    path("requests/<int:pk>/cancel/", requests.request_cancel, name="request_cancel"),
    path("requests/<int:pk>/release/", requests.request_release, name="request_release"),
    path(
        "requests/<int:pk>/resize/<int:offer_pk>/accept/",
        requests.request_resize_accept,
        name="request_resize_accept",
    ),
    path("cluster/", cluster.cluster, name="cluster"),
    path("prices/", prices.pricing, name="prices"),
    path("prices/upload/", prices.pricing_upload, name="prices_upload"),
    path("prices/feed/", prices.pricing_feed, name="prices_feed"),
    path("cluster/nodes/", cluster.cluster_nodes, name="cluster_nodes"),
    path("budgets/", billing.budget_index, name="budgets"),
    path("teams/<slug:slug>/budget/", billing.team_budget, name="team_budget"),
    path("teams/<slug:slug>/budget/set/", billing.team_budget_set, name="team_budget_set"),
    path("teams/<slug:slug>/statement.csv", billing.team_statement_csv, name="team_statement_csv"),
    path("requests/<int:pk>/billing/", billing.request_billing, name="request_billing"),
    path("operator/", operator.overview, name="operator"),
    path("operator/nodes/", operator.node_index, name="operator_nodes"),
    path("operator/nodes/<int:pk>/", operator.node_status, name="operator_node"),
    path("operator/nodes/<int:pk>/credential/", operator.node_credential, name="operator_node_credential"),
    path("operator/nodes/<int:pk>/reclaim/", operator.node_reclaim, name="operator_node_reclaim"),
    path("operator/nodes/<int:pk>/mig/", operator.node_mig_layout, name="operator_node_mig"),
    path("operator/pools/", operator.pool_index, name="operator_pools"),
    path("operator/pools/<int:pk>/", operator.pool_edit, name="operator_pool"),
    path("operator/quotas/", operator.quota_index, name="operator_quotas"),
    path("operator/identities/", operator.identity_index, name="operator_identities"),
    path("operator/identities/users/", operator.identity_user, name="operator_identity_user"),
    path("operator/what-if/", operator.what_if, name="operator_what_if"),
    path("operator/what-if/<int:pk>/", operator.what_if_run, name="operator_what_if_run"),
    path("", include("teams.urls")),
    path("admin/", admin.site.urls),
]

handler400 = "portal.api.errors.bad_request"
handler500 = "portal.api.errors.server_error"
