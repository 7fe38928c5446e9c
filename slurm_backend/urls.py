"""The Slurm backend's pages; portal/urls.py includes them without a namespace."""

from django.urls import path

from slurm_backend import views

urlpatterns = [
    path("operator/pools/<int:pk>/slurm/", views.pool_slurm, name="operator_pool_slurm"),
    path(
        "operator/pools/<int:pk>/slurm/disconnect/",
        views.pool_slurm_disconnect,
        name="operator_pool_slurm_disconnect",
    ),
]
