"""DESIGN rule 1 under real concurrency: writers on separate connections race for one card."""

import threading

import pytest
from django.db import connection, connections

from scheduler_app.models import GpuRequest
from scheduler_app.services.placement import OverCommitError, Slice, allocate

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WRITERS = 8


def race(targets):
    """Run each target in its own thread (own DB connection), all released at once."""
    barrier = threading.Barrier(len(targets))
    outcomes = [None] * len(targets)

    def run(i, target):
        try:
            barrier.wait()
            target()
            outcomes[i] = "ok"
        except OverCommitError:
            outcomes[i] = "refused"
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_concurrent_writers_never_overcommit_a_card(team, member, make_node):
    assert connection.vendor == "postgresql"
    gpu = make_node(gpus=1).gpus.get()
    requests = [
        GpuRequest.objects.create(team=team, user=member, name=f"r{i}", gpu_milli=300) for i in range(WRITERS)
    ]

    outcomes = race([lambda r=r: allocate(r, [Slice(gpu.id, 300, 1024)]) for r in requests])

    assert outcomes.count("ok") == 3
    assert outcomes.count("refused") == WRITERS - 3
    assert gpu.committed() == (900, 3072)


def test_concurrent_gangs_on_crossing_cards_neither_deadlock_nor_overcommit(team, member, make_node):
    first, second = make_node(gpus=2).gpus.order_by("index")
    gangs = [
        GpuRequest.objects.create(team=team, user=member, name=f"g{i}", gpu_milli=1000, num_gpus=2)
        for i in range(WRITERS)
    ]
    # Half list the cards one way round, half the other: without ordered locks they could deadlock.
    orders = [[first, second], [second, first]]

    outcomes = race(
        [
            lambda g=g, cards=orders[i % 2]: allocate(g, [Slice(c.id, 1000, 1) for c in cards])
            for i, g in enumerate(gangs)
        ]
    )

    assert outcomes.count("ok") == 1
    assert first.committed()[0] == second.committed()[0] == 1000
