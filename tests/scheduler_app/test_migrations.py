"""Slices that earlier code left open on finished requests are closed when the capacity guard arrives
(the planner now counts every open slice, so they would hold their cards for good)."""

import datetime as dt

import pytest
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from scheduler_app.models import Allocation
from scheduler_app.rules.invariants import violations
from tests.migration_steps import migrate_back, migrate_forward

BEFORE_THE_GUARD = [
    ("teams", None),
    ("audit", None),
    ("portal", "0002_api_tokens"),
    ("scheduler_app", "0002_gpu_sample"),
]


@pytest.fixture
def before_the_guard(transactional_db):
    old = migrate_back(BEFORE_THE_GUARD)
    yield old
    migrate_forward()
    ContentType.objects.clear_cache()


def test_slices_left_open_on_finished_requests_are_closed(before_the_guard):
    old = before_the_guard
    user = old.get_model("auth", "User").objects.create(username="carol")
    team = old.get_model("portal", "Team").objects.create(name="Language", slug="language")
    pool = old.get_model("scheduler_app", "Pool").objects.create(
        name="a100", gpu_model="A100-80GB", capacity_type="on-demand"
    )
    node = old.get_model("scheduler_app", "Node").objects.create(
        pool=pool, name="node-1", cpu_milli=64000, memory_mib=512 * 1024
    )
    gpu = old.get_model("scheduler_app", "Gpu").objects.create(
        node=node, index=0, uuid="GPU-0", model="A100-80GB", memory_mib=81920
    )
    requests = old.get_model("scheduler_app", "GpuRequest").objects
    began = timezone.now() - dt.timedelta(hours=1)
    done = requests.create(team=team, user=user, name="tokenizer-eval", gpu_milli=125, state="succeeded")
    requests.filter(pk=done.pk).update(ended_at=began + dt.timedelta(minutes=10))
    running = requests.create(team=team, user=user, name="serving", gpu_milli=250, state="running")
    slices = old.get_model("scheduler_app", "Allocation").objects
    for request, milli in ((done, 125), (running, 250)):
        slices.create(
            request=request,
            gpu=gpu,
            milli=milli,
            gpu_memory_mib=1024,
            billing_mode="on-demand",
            started_at=began,
        )

    migrate_forward()

    leaked = Allocation.objects.get(request_id=done.pk)
    assert leaked.ended_at == began + dt.timedelta(minutes=10)
    assert Allocation.objects.get(request_id=running.pk).ended_at is None
    assert violations() == []
