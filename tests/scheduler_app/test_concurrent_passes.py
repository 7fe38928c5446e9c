"""Two scheduling passes at once on PostgreSQL: both decide on the same snapshot, neither double-books."""

import threading

import pytest
from django.db import connection, connections
from django.db.models import Count, Sum

from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.passes.run import run_scheduling_pass

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


def test_cancelling_a_waiting_request_does_not_wait_for_the_pass_to_commit(
    team, member, make_node, monkeypatch
):
    """The pass locks only the requests it changes: a cancel of one it leaves waiting goes through
    while the pass still holds its transaction open, and the pass then leaves the cancel alone."""
    from scheduler_app.passes import run as pass_run

    make_node("node-0", gpus=1)
    placed = GpuRequest.objects.create(team=team, user=member, name="fits", gpu_milli=1000)
    waiting = GpuRequest.objects.create(team=team, user=member, name="waits", gpu_milli=1000)
    in_pass, release_pass = threading.Event(), threading.Event()
    real_store = pass_run.store_pass_state

    def store_and_hold(*args, **kwargs):
        real_store(*args, **kwargs)
        in_pass.set()
        release_pass.wait(timeout=30)

    monkeypatch.setattr(pass_run, "store_pass_state", store_and_hold)
    cancelled_while_pass_open = []

    def cancel_while_the_pass_is_open():
        try:
            in_pass.wait(timeout=30)
            from scheduler_app.services.requests import cancel_request

            cancel_request(GpuRequest.objects.get(pk=waiting.pk), user=member)
            cancelled_while_pass_open.append(not release_pass.is_set())
        finally:
            release_pass.set()
            connections.close_all()

    canceller = threading.Thread(target=cancel_while_the_pass_is_open)
    canceller.start()
    try:
        run_scheduling_pass()
    finally:
        release_pass.set()
        canceller.join(timeout=60)

    assert cancelled_while_pass_open == [True]
    assert GpuRequest.objects.get(pk=placed.pk).state == "scheduled"
    waiting.refresh_from_db()
    assert waiting.state == "cancelled" and waiting.pending_reason == ""
