from dataclasses import asdict

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render

from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.filters import ClusterNodeFilter
from scheduler_app.live.streams import stream_paths
from scheduler_app.live.ticker import latest_frame
from scheduler_app.models import Node
from scheduler_app.selectors import cluster_heatmap, cluster_picture

NODES_PER_PAGE = 50
# Up to this many cards, every pool's nodes load as soon as the page opens; above, on demand.
OPEN_POOLS_UP_TO_GPUS = 256


@login_required
def cluster(request):
    """The first paint: capacity per pool, the queue, and a compact heatmap of every card; the nodes'
    cards and slices load on demand (cluster_nodes), a pool or a search at a time."""
    picture = cluster_picture(request.user)
    chart = [
        {
            "pool": p.pool.name,
            "allocated": p.allocated_milli / MILLI_PER_GPU,
            "foreign": p.foreign_milli / MILLI_PER_GPU,
            "free": p.free_milli / MILLI_PER_GPU,
            "unavailable": max(0, p.total_milli - p.allocated_milli - p.foreign_milli - p.free_milli)
            / MILLI_PER_GPU,
        }
        for p in picture.pools
    ]
    heatmap = asdict(cluster_heatmap(latest_frame()["gpus"]))
    total_gpus = sum(p.total_milli for p in picture.pools) // MILLI_PER_GPU
    context = {
        "picture": picture,
        "chart": chart,
        "heatmap": heatmap,
        "open_pools": total_gpus <= OPEN_POOLS_UP_TO_GPUS,
        "streams": stream_paths(request.user)[:1],
        "filters": ClusterNodeFilter().form,
    }
    return render(request, "portal/cluster.html", context)


@login_required
def cluster_nodes(request):
    """One page of nodes (by pool, part of the name, state) with their cards and slices, as a fragment
    the cluster page inserts."""
    given = {name: value for name, value in request.GET.items() if value and name != "page"}
    filters = ClusterNodeFilter(given, Node.objects.select_related("pool").order_by("name"))
    nodes = filters.qs if filters.is_valid() else Node.objects.none()
    page = Paginator(nodes, NODES_PER_PAGE).get_page(request.GET.get("page"))
    picture = cluster_picture(request.user, page)
    context = {"nodes": picture.nodes, "page": page, "errors": filters.errors}
    return render(request, "portal/cluster_nodes.html", context)
