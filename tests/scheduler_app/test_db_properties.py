"""DESIGN rules 1 and 2 through the real services and database: whatever the stream of submits,
scheduling passes, cancels, releases and node losses, no card is over-committed and every
accepted request is in exactly one state, with open segments only while it is active."""

from django.db import transaction
from django.db.models import Count, Q, Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.choices import CapacityType, NodeStatus, RequestState
from scheduler_app.models import Allocation, Gpu, GpuRequest, Node
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.rules.lifecycle import ACTIVE_STATES, TERMINAL_STATES
from scheduler_app.services.inventory import create_pool, register_node
from scheduler_app.services.node_health import handle_node_loss
from scheduler_app.services.requests import cancel_request, release_request, submit_request
from scheduler_app.services.transitions import transition_request
from teams.models import Membership, Team

shapes = st.one_of(
    st.tuples(st.sampled_from([125, 250, 375, 500, 750, 1000]), st.just(1)),
    st.tuples(st.just(1000), st.sampled_from([2, 4])),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), shapes, st.sampled_from(["training", "inference"]), st.booleans()),
        st.tuples(st.just("pass")),
        st.tuples(st.just("start"), st.integers(0, 30)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("release"), st.integers(0, 30)),
        st.tuples(st.just("lose-node"), st.integers(0, 2)),
    ),
    min_size=3,
    max_size=25,
)


def build_cluster(django_user_model):
    on_demand = create_pool(name="od", gpu_model="A100", capacity_type=CapacityType.ON_DEMAND)
    spot = create_pool(name="spot", gpu_model="A100", capacity_type=CapacityType.SPOT)
    for name, pool, cards in (("od-1", on_demand, 4), ("od-2", on_demand, 2), ("spot-1", spot, 4)):
        register_node(
            pool=pool,
            name=name,
            cpu_milli=64_000,
            memory_mib=512_000,
            gpus=[{"uuid": f"{name}-{i}", "model": "A100", "memory_mib": 40960} for i in range(cards)],
        )
    team = Team.objects.create(name="T", slug="t")
    user = django_user_model.objects.create_user("u")
    Membership.objects.create(team=team, user=user)
    return team, user


def play(operation, team, user):
    kind, *args = operation
    requests = list(GpuRequest.objects.order_by("pk"))
    pick = requests[args[0] % len(requests)] if requests and kind in {"start", "cancel", "release"} else None
    if kind == "submit":
        (milli, num_gpus), task, spot = args
        extra = (
            {"billing_mode": "spot", "checkpoint_interval_s": 600, "allow_on_demand_fallback": True}
            if spot
            else {}
        )
        submit_request(
            user=user, team=team, name="r", task_type=task, gpu_milli=milli, num_gpus=num_gpus, **extra
        )
    elif kind == "pass":
        run_scheduling_pass()
    elif kind == "start" and pick and pick.state == RequestState.SCHEDULED:
        transition_request(pick, RequestState.RUNNING)
    elif kind == "cancel" and pick and not pick.is_terminal():
        cancel_request(pick, user=user)
    elif kind == "release" and pick and pick.is_active():
        release_request(pick, user=user)
    elif kind == "lose-node":
        node = Node.objects.order_by("name")[args[0]]
        if node.status == NodeStatus.READY:
            handle_node_loss(node, reason="test")


def assert_invariants(submitted: int):
    held = Gpu.objects.annotate(
        milli=Sum("allocations__milli", filter=Q(allocations__ended_at=None), default=0),
        memory=Sum("allocations__gpu_memory_mib", filter=Q(allocations__ended_at=None), default=0),
    )
    for gpu in held:
        assert gpu.milli <= 1000 and gpu.memory <= gpu.memory_mib, f"{gpu} over-committed"
    states = GpuRequest.objects.values_list("state", flat=True)
    assert len(states) == submitted, "a request was lost or duplicated"
    assert all(s in ACTIVE_STATES | TERMINAL_STATES | {RequestState.PENDING} for s in states)
    open_counts = dict(
        Allocation.objects.filter(ended_at__isnull=True)
        .values("request_id")
        .annotate(n=Count("id"))
        .values_list("request_id", "n")
    )
    for request in GpuRequest.objects.all():
        if request.is_active():
            assert open_counts.get(request.pk) == request.num_gpus, f"{request} active without its cards"
        else:
            assert request.pk not in open_counts, f"{request} holds cards while {request.state}"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_any_operation_stream_keeps_capacity_and_states_consistent(db, django_user_model, stream):
    with transaction.atomic():
        team, user = build_cluster(django_user_model)
        submitted = 0
        for operation in stream:
            play(operation, team, user)
            submitted += operation[0] == "submit"
            assert_invariants(submitted)
        transaction.set_rollback(True)
