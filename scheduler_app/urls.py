"""The scheduler's pages; portal/urls.py includes them without a namespace, so the names are the project's.
The request form's prices, a request's billing mode and resize, and the operators' pools page are billing's
(billing_app/urls.py)."""

from django.urls import path

from scheduler_app.views import cluster, operator, requests

urlpatterns = [
    path("requests/", requests.request_index, name="requests"),
    path("requests/new/", requests.request_new, name="request_new"),
    path("requests/<int:pk>/", requests.request_detail, name="request_detail"),
    path("requests/<int:pk>/cancel/", requests.request_cancel, name="request_cancel"),
    path("requests/<int:pk>/release/", requests.request_release, name="request_release"),
    path("requests/<int:pk>/terminal/", requests.request_terminal, name="request_terminal"),
    path("cluster/", cluster.cluster, name="cluster"),
    path("cluster/nodes/", cluster.cluster_nodes, name="cluster_nodes"),
    path("operator/", operator.overview, name="operator"),
    path("operator/nodes/", operator.node_index, name="operator_nodes"),
    path("operator/nodes/<int:pk>/", operator.node_status, name="operator_node"),
    path("operator/nodes/<int:pk>/credential/", operator.node_credential, name="operator_node_credential"),
    path("operator/nodes/<int:pk>/reclaim/", operator.node_reclaim, name="operator_node_reclaim"),
    path("operator/nodes/<int:pk>/mig/", operator.node_mig_layout, name="operator_node_mig"),
    path("operator/pools/<int:pk>/", operator.pool_edit, name="operator_pool"),
    path("operator/quotas/", operator.quota_index, name="operator_quotas"),
    path("operator/identities/", operator.identity_index, name="operator_identities"),
    path("operator/identities/users/", operator.identity_user, name="operator_identity_user"),
    path("operator/what-if/", operator.what_if, name="operator_what_if"),
    path("operator/what-if/<int:pk>/", operator.what_if_run, name="operator_what_if_run"),
]
