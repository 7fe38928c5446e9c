"""Two scheduling passes at once on PostgreSQL: both decide on the same snapshot, neither double-books."""

import threading

import pytest
from django.db import connection, connections
from django.db.models import Count, Sum

from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.scheduling import run_scheduling_pass

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_two_passes_at_once_never_double_book(team, member, make_node):
    assert connection.vendor == "postgresql"
    for n in range(3):
        make_node(f"node-{n}", gpus=2)
    for i in range(40):
        GpuRequest.objects.create(team=team, user=member, name=f"r{i}", gpu_milli=(125, 250, 375, 500)[i % 4])
    barrier = threading.Barrier(2)
    results = []

    def one_pass():
        try:
            barrier.wait()
            results.append(run_scheduling_pass())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 2
    per_gpu = Gpu.objects.annotate(
        milli=Sum("allocations__milli", default=0), mem=Sum("allocations__gpu_memory_mib", default=0)
    )
    assert all(g.milli <= 1000 and g.mem <= g.memory_mib for g in per_gpu)
    assert sum(g.milli for g in per_gpu) > 0
    doubled = Allocation.objects.values("request").annotate(n=Count("id")).filter(n__gt=1)
    assert not doubled.exists()
    started = sum(r.started for r in results)
    assert started == GpuRequest.objects.filter(state="scheduled").count()
