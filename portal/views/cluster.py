from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.selectors import cluster_picture


@login_required
def cluster(request):
    picture = cluster_picture(request.user)
    chart = [
        {
            "pool": p.pool.name,
            "allocated": p.allocated_milli / MILLI_PER_GPU,
            "free": p.free_milli / MILLI_PER_GPU,
            "unavailable": (p.total_milli - p.allocated_milli - p.free_milli) / MILLI_PER_GPU,
        }
        for p in picture.pools
    ]
    return render(request, "portal/cluster.html", {"picture": picture, "chart": chart})
