"""Every database constraint holds even when validation is bypassed."""

import datetime as dt

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.models import Event
from scheduler_app.models import Allocation, Gpu, GpuRequest, Pool
from teams.models import Membership
from teams.permissions import NotAllowed


def violates(**kwargs):
    return pytest.raises(IntegrityError)


@pytest.fixture
def gpu(make_node):
    return make_node(gpus=1).gpus.get()


@pytest.fixture
def make_request(team, member):
    def make(**fields):
        values = {"team": team, "user": member, "name": "job", "gpu_milli": 500} | fields
        with transaction.atomic():
            return GpuRequest.objects.create(**values)

    return make


@pytest.mark.parametrize(
    "fields",
    [
        {"gpu_milli": 0},
        {"gpu_milli": 1001},
        {"num_gpus": 0},
        {"num_gpus": 9, "gpu_milli": 1000},
        {"num_gpus": 2, "gpu_milli": 500},
        {"gpu_memory_mib": 0},
        {"billing_mode": "spot", "checkpoint_interval_s": None},
        {"max_duration_s": 0},
        {"state": "sleeping"},
        {"task_type": "mining"},
        {"billing_mode": "barter"},
    ],
    ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()),
)
def test_request_constraint_refuses_bad_row(make_request, fields):
    with pytest.raises(IntegrityError):
        make_request(**fields)
    assert not GpuRequest.objects.exists()


def test_request_constraint_accepts_good_rows(make_request):
    make_request(gpu_milli=1)
    make_request(gpu_milli=1000, num_gpus=8)
    make_request(billing_mode="spot", checkpoint_interval_s=600)
    assert GpuRequest.objects.count() == 3


@pytest.mark.parametrize("granularity", [0, 1001])
def test_pool_granularity_must_be_within_a_card(db, granularity):
    with pytest.raises(IntegrityError):
        Pool.objects.create(name="p", gpu_model="A100", granularity_milli=granularity)


def test_pool_capacity_type_must_be_known(db):
    with pytest.raises(IntegrityError):
        Pool.objects.create(name="p", gpu_model="A100", capacity_type="reserved")


def test_gpu_index_is_unique_per_node(gpu):
    with pytest.raises(IntegrityError):
        Gpu.objects.create(node=gpu.node, index=0, uuid="GPU-other", model="A100", memory_mib=1)


def test_gpu_uuid_is_unique(gpu, make_node):
    other = make_node(name="node-2", gpus=0)
    with pytest.raises(IntegrityError):
        Gpu.objects.create(node=other, index=0, uuid=gpu.uuid, model="A100", memory_mib=1)


def test_gpu_memory_must_be_positive(gpu):
    with pytest.raises(IntegrityError):
        Gpu.objects.create(node=gpu.node, index=1, uuid="GPU-zero", model="A100", memory_mib=0)


def test_node_status_must_be_known(gpu):
    with pytest.raises(IntegrityError):
        type(gpu.node).objects.filter(pk=gpu.node.pk).update(status="sleeping")


def test_membership_is_unique_per_team_and_user(team, member):
    with pytest.raises(IntegrityError):
        Membership.objects.create(team=team, user=member)


def test_membership_role_must_be_known(team, outsider):
    with pytest.raises(IntegrityError):
        Membership.objects.create(team=team, user=outsider, role="owner")


@pytest.mark.parametrize("milli", [0, 1001])
def test_allocation_milli_within_a_card(make_request, gpu, milli):
    request = make_request()
    with pytest.raises(IntegrityError):
        Allocation.objects.create(
            request=request, gpu=gpu, milli=milli, gpu_memory_mib=1, billing_mode="on-demand"
        )


def test_allocation_cannot_end_before_it_starts(make_request, gpu):
    now = timezone.now()
    with pytest.raises(IntegrityError):
        Allocation.objects.create(
            request=make_request(),
            gpu=gpu,
            milli=100,
            gpu_memory_mib=1,
            billing_mode="spot",
            started_at=now,
            ended_at=now - dt.timedelta(seconds=1),
        )


def test_request_has_one_open_segment_per_card(make_request, gpu):
    request = make_request()
    Allocation.objects.create(request=request, gpu=gpu, milli=100, gpu_memory_mib=1, billing_mode="on-demand")
    with pytest.raises(IntegrityError):
        Allocation.objects.create(
            request=request, gpu=gpu, milli=100, gpu_memory_mib=1, billing_mode="on-demand"
        )


def test_closed_segments_may_repeat_on_a_card(make_request, gpu):
    request = make_request()
    now = timezone.now()
    for _ in range(2):
        Allocation.objects.create(
            request=request,
            gpu=gpu,
            milli=100,
            gpu_memory_mib=1,
            billing_mode="spot",
            started_at=now,
            ended_at=now,
        )
    assert Allocation.objects.count() == 2


def test_event_log_is_append_only(make_request):
    from audit.events import log_event

    event = log_event(make_request(), "pending", reason="submitted")

    event.reason = "rewritten"
    with pytest.raises(NotAllowed):
        event.save()
    with pytest.raises(NotAllowed):
        event.delete()
    with pytest.raises(NotAllowed):
        Event.objects.all().delete()
    with pytest.raises(NotAllowed):
        Event.objects.update(reason="x")
    assert Event.objects.get().reason == "submitted"


@pytest.mark.parametrize(
    ("milli", "num_gpus", "label"),
    [
        (125, 1, "1/8 GPU"),
        (250, 1, "1/4 GPU"),
        (500, 1, "1/2 GPU"),
        (375, 1, "3/8 GPU"),
        (300, 1, "0.3 GPU"),
        (1000, 1, "1 GPU"),
        (1000, 4, "4 GPUs"),
    ],
)
def test_share_label_reads_like_people_say_it(milli, num_gpus, label):
    assert GpuRequest(gpu_milli=milli, num_gpus=num_gpus).share_label() == label
