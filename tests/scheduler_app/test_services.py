import pytest
from django.core.exceptions import ValidationError

from audit.models import Event
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.services.inventory import node_for_agent_token, register_node, set_node_status
from scheduler_app.services.placement import OverCommitError, Slice, allocate
from scheduler_app.services.requests import cancel_request, submit_request
from teams.permissions import NotAllowed

GOOD = {"name": "train", "task_type": "training", "gpu_milli": 250}


def assert_refused(field, message, **kwargs):
    events_before = Event.objects.count()
    with pytest.raises(ValidationError) as caught:
        submit_request(**kwargs)
    assert field in caught.value.message_dict, caught.value.message_dict
    assert message in " ".join(caught.value.message_dict[field])
    assert not GpuRequest.objects.exists()
    assert Event.objects.count() == events_before


def test_member_submits_a_pending_request_with_a_logged_event(team, member, pool):
    request = submit_request(user=member, team=team, pool_name="a100", **GOOD)

    assert request.state == RequestState.PENDING
    assert request.pool == pool
    event = Event.objects.get()
    assert (event.to_state, event.actor, event.team) == ("pending", member, team)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"gpu_milli": -5}, "gpu_milli", "greater than or equal to"),
        ({"gpu_milli": 0}, "gpu_milli", "greater than or equal to 1"),
        ({"gpu_milli": 1001}, "gpu_milli", "less than or equal to 1000"),
        ({"gpu_milli": 500, "num_gpus": 2}, "gpu_milli", "whole cards"),
        ({"num_gpus": 9, "gpu_milli": 1000}, "num_gpus", "less than or equal to 8"),
        ({"task_type": "mining"}, "task_type", "not a valid choice"),
        ({"billing_mode": "spot"}, "checkpoint_interval_s", "must declare a checkpoint interval"),
        (
            {"billing_mode": "spot", "checkpoint_interval_s": 3600},
            "checkpoint_interval_s",
            "every 30 minutes",
        ),
        ({"name": ""}, "name", "cannot be blank"),
        ({"priority": 1000}, "priority", "less than or equal to 100"),
        ({"max_duration_s": 0}, "max_duration_s", "greater than or equal to 1"),
    ],
)
def test_bad_input_is_refused_naming_the_field(team, member, fields, field, message):
    assert_refused(field, message, user=member, team=team, **(GOOD | fields))


def test_unknown_pool_is_refused(team, member, pool):
    assert_refused("pool", "No pool named 'h100'", user=member, team=team, pool_name="h100", **GOOD)


def test_missing_team_is_refused(member):
    assert_refused("team", "needs a team", user=member, team=None, **GOOD)


def test_outsider_cannot_submit_for_another_team(team, outsider):
    assert_refused("team", "not a member of team Vision", user=outsider, team=team, **GOOD)


def test_unknown_gpu_model_is_refused(team, member, make_node):
    make_node()
    assert_refused("gpu_model", "No GPU of model 'H100'", user=member, team=team, gpu_model="H100", **GOOD)


def test_gpu_model_must_match_the_pool(team, member, make_node):
    make_node()
    assert_refused(
        "gpu_model",
        "has A100-80GB GPUs",
        user=member,
        team=team,
        pool_name="a100",
        gpu_model="RTX-4090",
        **GOOD,
    )


def test_memory_no_card_has_is_refused(team, member, make_node):
    make_node(memory_mib=81920)
    assert_refused(
        "gpu_memory_mib", "largest has 81920 MiB", user=member, team=team, gpu_memory_mib=200_000, **GOOD
    )


@pytest.fixture
def submit(team, member):
    def make(**fields):
        return submit_request(user=member, team=team, **(GOOD | fields))

    return make


def test_allocate_takes_cards_and_schedules(submit, make_node):
    gpu = make_node(gpus=1).gpus.get()
    request = submit(gpu_milli=250)

    allocate(request, [Slice(gpu.id, 250, 20480)])

    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
    assert gpu.committed() == (250, 20480)
    assert "placed on node-1/gpu0" in Event.objects.filter(to_state="scheduled").get().reason


def test_allocate_refuses_share_over_a_card_and_writes_nothing(submit, make_node):
    gpu = make_node(gpus=1).gpus.get()
    allocate(submit(gpu_milli=750), [Slice(gpu.id, 750, 1000)])
    late = submit(gpu_milli=500)

    with pytest.raises(OverCommitError, match="250 milli-GPU free, not 500"):
        allocate(late, [Slice(gpu.id, 500, 1000)])

    late.refresh_from_db()
    assert late.state == RequestState.PENDING
    assert gpu.committed() == (750, 1000)


def test_allocate_refuses_memory_over_a_card(submit, make_node):
    gpu = make_node(gpus=1, memory_mib=24576).gpus.get()
    allocate(submit(gpu_milli=250), [Slice(gpu.id, 250, 20000)])

    with pytest.raises(OverCommitError, match="4576 MiB free, not 8000"):
        allocate(submit(gpu_milli=250), [Slice(gpu.id, 250, 8000)])
    assert Allocation.objects.count() == 1


def test_gang_is_all_or_nothing(submit, make_node):
    node = make_node(gpus=2)
    first, second = node.gpus.order_by("index")
    allocate(submit(gpu_milli=500), [Slice(second.id, 500, 1)])
    gang = submit(gpu_milli=1000, num_gpus=2)

    with pytest.raises(OverCommitError):
        allocate(gang, [Slice(first.id, 1000, 1), Slice(second.id, 1000, 1)])

    assert first.committed() == (0, 0)
    assert not Allocation.objects.filter(request=gang).exists()


def test_gang_needs_as_many_distinct_cards_as_it_asks_for(submit, make_node):
    gpu = make_node(gpus=1).gpus.get()
    gang = submit(gpu_milli=1000, num_gpus=2)
    with pytest.raises(ValidationError, match="needs 2 distinct card"):
        allocate(gang, [Slice(gpu.id, 1000, 1), Slice(gpu.id, 1000, 1)])


def test_draining_node_takes_no_new_work(submit, make_node, operator):
    node = make_node(gpus=1)
    set_node_status(node, NodeStatus.DRAINING, actor=operator, reason="maintenance")

    with pytest.raises(OverCommitError, match="draining node"):
        allocate(submit(), [Slice(node.gpus.get().id, 250, 1)])
    event = Event.objects.get(to_state="draining")
    assert (event.from_state, event.actor, event.reason) == ("ready", operator, "maintenance")


def test_unknown_node_status_is_refused(make_node):
    node = make_node()
    with pytest.raises(ValidationError, match="'asleep' is not a node status"):
        set_node_status(node, "asleep")
    node.refresh_from_db()
    assert node.status == NodeStatus.READY


def test_cancel_closes_segments_and_ends_cancelled(submit, make_node, member):
    gpu = make_node(gpus=1).gpus.get()
    request = submit()
    allocate(request, [Slice(gpu.id, 250, 1)])

    cancel_request(request, user=member)

    assert request.state == RequestState.CANCELLED
    assert gpu.committed() == (0, 0)
    assert request.allocations.get().ended_at is not None


def test_outsider_cannot_cancel_another_teams_request(submit, outsider):
    request = submit()
    with pytest.raises(NotAllowed):
        cancel_request(request, user=outsider)
    request.refresh_from_db()
    assert request.state == RequestState.PENDING


def test_agent_credential_is_stored_hashed_and_authenticates(pool):
    node, token = register_node(
        pool=pool,
        name="n",
        cpu_milli=1000,
        memory_mib=1024,
        gpus=[{"uuid": "G", "model": "A", "memory_mib": 1}],
    )
    assert token not in node.agent_token_hash
    assert len(node.agent_token_hash) == 64
    assert node_for_agent_token(token) == node
    assert node_for_agent_token(token + "x") is None
    assert node_for_agent_token("") is None


def test_release_ends_running_work_released_not_succeeded(submit, make_node, member):
    from scheduler_app.services.requests import release_request
    from scheduler_app.services.transitions import transition_request

    gpu = make_node(gpus=1).gpus.get()
    request = submit()
    allocate(request, [Slice(gpu.id, 250, 1)])
    transition_request(request, RequestState.RUNNING)

    release_request(request, user=member)

    assert request.state == RequestState.RELEASED
    assert request.is_terminal() and request.ended_at is not None
    assert gpu.committed() == (0, 0)


def test_release_of_scheduled_work_that_never_started_ends_cancelled(submit, make_node, member):
    from scheduler_app.services.requests import release_request

    gpu = make_node(gpus=1).gpus.get()
    request = submit()
    allocate(request, [Slice(gpu.id, 250, 1)])

    release_request(request, user=member)

    assert request.state == RequestState.CANCELLED


def test_release_of_pending_request_is_refused(submit, member):
    from scheduler_app.services.requests import release_request

    request = submit()
    with pytest.raises(ValidationError, match="holds no GPU to release"):
        release_request(request, user=member)


@pytest.mark.parametrize(
    ("capacity", "billing", "message"),
    [("spot", "on-demand", "is spot capacity"), ("on-demand", "spot", "is on-demand")],
)
def test_billing_mode_must_match_the_named_pool(team, member, capacity, billing, message):
    from scheduler_app.services.inventory import create_pool

    create_pool(name="named", gpu_model="A100", capacity_type=capacity)
    assert_refused(
        "billing_mode",
        message,
        user=member,
        team=team,
        pool_name="named",
        **(GOOD | {"billing_mode": billing, "checkpoint_interval_s": 600}),
    )
