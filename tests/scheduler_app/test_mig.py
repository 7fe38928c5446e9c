"""MIG pools end to end: the pass places requests in whole GPU instances, the locked apply and the
database hold the geometry, operators set modes and layouts (page and API) with clear refusals,
and the cluster picture shows each instance."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from audit.models import Event
from billing_app.services import set_pool_price
from billing_app.switching import switch_billing_mode
from scheduler_app.choices import BillingMode, CapacityType, RequestState
from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.passes.estimates import estimate_request
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool, set_mig_layout, update_pool
from scheduler_app.services.placement import OverCommitError, Slice, allocate
from scheduler_app.services.requests import submit_request
from tests.scheduler_app.test_agent_api import agent_client

LAYOUT = "3g.40gb@0,2g.20gb@4,1g.10gb@6"


@pytest.fixture
def mig_pool(db, operator):
    """An A100-80GB pool; mig_card(layout, mode) puts it in that MIG mode and adds a one-card node."""
    return create_pool(name="a100-mig", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)


@pytest.fixture
def mig_card(mig_pool, make_node, operator):
    def make(layout=LAYOUT, mode="fixed", name="mig-1"):
        if mig_pool.mig_mode != mode:
            update_pool(mig_pool, actor=operator, mig_mode=mode)
            mig_pool.refresh_from_db()
        gpu = make_node(name, gpus=1, pool=mig_pool).gpus.get()
        return set_mig_layout(gpu, layout, actor=operator)

    return make


@pytest.fixture
def submit(team, member, mig_pool):
    def make(name="job", gpu_milli=125, **fields):
        values = {
            "name": name,
            "task_type": "training",
            "gpu_milli": gpu_milli,
            "pool_name": mig_pool.name,
        } | fields
        return submit_request(user=member, team=team, **values)

    return make


def held(request):
    return list(
        Allocation.objects.committed()
        .filter(request=request)
        .values_list("mig_instance", "milli", "gpu_memory_mib", "mig_slots")
    )


def test_pass_gives_eighth_quarter_and_three_eighths_their_fixed_instances(mig_card, submit):
    mig_card()
    eighth, quarter, three_eighths = submit("a", 125), submit("b", 250), submit("c", 375)
    late = submit("d", 125)

    result = run_scheduling_pass()

    assert result.started == 3
    assert held(eighth) == [("1g.10gb@6", 142, 10240, 1)]
    assert held(quarter) == [("2g.20gb@4", 285, 20480, 2)]
    assert held(three_eighths) == [("3g.40gb@0", 428, 40960, 4)]
    late.refresh_from_db()
    assert late.state == RequestState.PENDING  # no instance is shared
    assert Event.objects.filter(object_id=eighth.pk, to_state="scheduled", reason__contains="MIG 1g.10gb@6")


def test_pass_repartitions_an_idle_dynamic_card_and_records_its_layout(mig_card, submit):
    gpu = mig_card("7g.80gb@0", mode="dynamic")
    request = submit("small", 125)

    run_scheduling_pass()

    assert held(request) == [("1g.10gb@0", 142, 10240, 1)]
    gpu.refresh_from_db()
    assert gpu.mig_layout == ",".join(f"1g.10gb@{s}" for s in range(7))


def test_pass_keeps_a_busy_dynamic_cards_layout(mig_card, submit):
    gpu = mig_card("3g.40gb@0,3g.40gb@4", mode="dynamic")
    submit("big", 375)
    run_scheduling_pass()
    small = submit("small", 125)

    run_scheduling_pass()

    assert held(small) == [("3g.40gb@4", 428, 40960, 4)]
    gpu.refresh_from_db()
    assert gpu.mig_layout == "3g.40gb@0,3g.40gb@4"


def test_locked_apply_refuses_a_taken_instance_a_partial_share_and_an_unknown_one(mig_card, submit):
    gpu = mig_card()
    first = submit("first")
    allocate(first, [Slice(gpu.pk, 142, 10240, "1g.10gb@6")])
    second = submit("second")

    refusals = {
        "in use": Slice(gpu.pk, 142, 10240, "1g.10gb@6"),
        "a slice holds a whole GPU instance": Slice(gpu.pk, 125, 10240),
        "has no MIG instance 1g.10gb@5": Slice(gpu.pk, 142, 10240, "1g.10gb@5"),
        "gives 285 milli-GPU, not 250": Slice(gpu.pk, 250, 20480, "2g.20gb@4"),
        "has a fixed MIG layout": Slice(gpu.pk, 428, 40960, "3g.40gb@4", "3g.40gb@0,3g.40gb@4"),
    }
    for why, piece in refusals.items():
        with pytest.raises(OverCommitError, match=why):
            allocate(second, [piece])

    second.refresh_from_db()
    assert second.state == RequestState.PENDING
    assert Allocation.objects.committed().count() == 1


def planted_slice_refused(request, gpu, instance, milli, memory_mib, slots, match=None):
    """Write an open slice past the services (as a bug would) and expect the database to refuse it."""
    GpuRequest.objects.filter(pk=request.pk).update(state=RequestState.SCHEDULED)
    fields = {"milli": milli, "gpu_memory_mib": memory_mib, "mig_instance": instance, "mig_slots": slots}
    with pytest.raises(IntegrityError, match=match), transaction.atomic():
        Allocation.objects.create(request=request, gpu=gpu, billing_mode=BillingMode.ON_DEMAND, **fields)
    GpuRequest.objects.filter(pk=request.pk).update(state=RequestState.PENDING)
    return Allocation.objects.filter(request=request).count() == 0


def test_locked_apply_repartitions_a_dynamic_card_only_when_idle(mig_card, submit):
    gpu = mig_card("3g.40gb@0,3g.40gb@4", mode="dynamic")
    allocate(submit("first"), [Slice(gpu.pk, 428, 40960, "3g.40gb@0")])
    second = submit("second")

    with pytest.raises(OverCommitError, match="only an idle card is re-partitioned"):
        allocate(second, [Slice(gpu.pk, 142, 10240, "1g.10gb@4", "1g.10gb@4,1g.10gb@5,1g.10gb@6")])
    allocate(second, [Slice(gpu.pk, 428, 40960, "3g.40gb@4")])

    gpu.refresh_from_db()
    assert gpu.mig_layout == "3g.40gb@0,3g.40gb@4"


def test_database_refuses_one_instance_held_twice(mig_card, submit):
    gpu = mig_card()
    allocate(submit("first"), [Slice(gpu.pk, 142, 10240, "1g.10gb@6")])

    assert planted_slice_refused(submit("second"), gpu, "1g.10gb@6", 142, 10240, 1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_database_refuses_overlapping_instances_on_one_card(mig_card, submit):
    gpu = mig_card("3g.40gb@4", mode="dynamic")
    allocate(submit("first"), [Slice(gpu.pk, 428, 40960, "3g.40gb@4")])

    assert planted_slice_refused(
        submit("second"), gpu, "2g.20gb@4", 285, 20480, 2, match="overlaps another open instance"
    )


def test_agent_work_names_the_instance_held(mig_card, submit):
    gpu = mig_card()
    request = submit("serve", 250)
    run_scheduling_pass()
    work = agent_client(gpu.node).get("/api/v1/agent/work/").json()

    assert [(w["request_id"], w["gpus"][0]["mig_instance"]) for w in work] == [(request.pk, "2g.20gb@4")]


def test_billing_switch_reopens_the_slice_on_the_same_instance(mig_card, submit, member):
    gpu = mig_card()
    request = submit("serve", 250)
    run_scheduling_pass()

    switch_billing_mode(request, BillingMode.SPOT, user=member, checkpoint_interval_s=600)

    assert held(request) == [("2g.20gb@4", 285, 20480, 2)]
    assert Allocation.objects.filter(request=request, gpu=gpu).count() == 2


def test_estimate_names_the_instance_and_prices_it_whole(mig_card, team, member, operator, mig_pool):
    mig_card()
    set_pool_price(mig_pool, "7.00", actor=operator)

    estimate = estimate_request(user=member, team=team, pool_name=mig_pool.name, gpu_milli=250)

    assert estimate.starts_now and estimate.where == "mig-1/gpu0 MIG 2g.20gb@4"
    assert estimate.prices.placed.usd_per_hour == Decimal("2.00")  # 285/1000 of 7.00 a GPU-hour, not 1.75


# Operators: modes and layouts, with clear refusals that change nothing.


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ("3g.40gb@2", "3g.40gb may start only at memory slice 0, 4"),
        ("3g.40gb@0,2g.20gb@2", "2g.20gb@2 overlaps 3g.40gb@0"),
        ("5g.50gb@0", "unknown profile '5g.50gb'"),
    ],
)
def test_invalid_layout_is_refused_and_the_card_keeps_its_own(mig_card, operator, layout, why):
    gpu = mig_card()

    with pytest.raises(ValidationError, match=why):
        set_mig_layout(gpu, layout, actor=operator)

    gpu.refresh_from_db()
    assert gpu.mig_layout == LAYOUT


def test_layout_change_keeps_the_instances_in_use(mig_card, submit, operator):
    gpu = mig_card()
    allocate(submit(), [Slice(gpu.pk, 142, 10240, "1g.10gb@6")])

    with pytest.raises(ValidationError, match=r"instance 1g\.10gb@6 in use"):
        set_mig_layout(gpu, "7g.80gb@0", actor=operator)
    set_mig_layout(gpu, "4g.40gb@0,2g.20gb@4,1g.10gb@6", actor=operator)

    gpu.refresh_from_db()
    assert gpu.mig_layout == "4g.40gb@0,2g.20gb@4,1g.10gb@6"


def test_pool_leaves_mig_mode_only_without_work(mig_card, submit, operator, mig_pool):
    gpu = mig_card()
    allocate(submit(), [Slice(gpu.pk, 142, 10240, "1g.10gb@6")])

    with pytest.raises(ValidationError, match="has work on its cards"):
        update_pool(mig_pool, actor=operator, mig_mode="")

    mig_pool.refresh_from_db()
    assert mig_pool.mig_mode == "fixed"


def test_leaving_mig_mode_makes_the_cards_whole_again(mig_card, operator, mig_pool):
    gpu = mig_card()

    update_pool(mig_pool, actor=operator, mig_mode="")

    gpu.refresh_from_db()
    assert gpu.mig_layout == ""


def test_mig_mode_needs_cards_with_a_mig_geometry(make_node, operator):
    small = create_pool(name="l4", gpu_model="L4", capacity_type=CapacityType.ON_DEMAND)
    make_node("l4-1", gpus=1, memory_mib=24576, pool=small)

    with pytest.raises(ValidationError, match="has no MIG geometry"):
        update_pool(small, actor=operator, mig_mode="fixed")


def test_layout_only_in_a_mig_pool(make_node, operator):
    gpu = make_node(gpus=1).gpus.get()

    with pytest.raises(ValidationError, match="is not in MIG mode"):
        set_mig_layout(gpu, LAYOUT, actor=operator)


def test_api_sets_a_layout_and_refuses_an_invalid_one_with_its_reason(mig_card, api_client, operator, member):
    gpu = mig_card()
    url = f"/api/v1/nodes/{gpu.node_id}/mig-layout/"
    client = api_client(operator)

    bad = client.post(url, {"gpu_index": 0, "mig_layout": "3g.40gb@2"}, format="json")
    missing = client.post(url, {"gpu_index": 3, "mig_layout": "7g.80gb@0"}, format="json")
    denied = api_client(member).post(url, {"gpu_index": 0, "mig_layout": "7g.80gb@0"}, format="json")
    good = client.post(url, {"gpu_index": 0, "mig_layout": "7g.80gb@0"}, format="json")

    assert bad.status_code == 400
    assert "may start only at memory slice 0, 4" in bad.json()["error"]["fields"]["mig_layout"][0]
    assert missing.status_code == 400 and "has no GPU 3" in missing.json()["error"]["fields"]["gpu_index"][0]
    assert denied.status_code == 403
    assert good.status_code == 200
    assert (good.json()["mig_mode"], good.json()["mig_layouts"]) == ("fixed", ["7g.80gb@0"])


def test_api_pool_mig_mode_is_validated(api_client, operator, make_node):
    small = create_pool(name="l4", gpu_model="L4", capacity_type=CapacityType.ON_DEMAND)
    make_node("l4-1", gpus=1, memory_mib=24576, pool=small)
    client = api_client(operator)

    unknown = client.patch("/api/v1/pools/l4/", {"mig_mode": "sometimes"}, format="json")
    no_geometry = client.patch("/api/v1/pools/l4/", {"mig_mode": "dynamic"}, format="json")

    assert unknown.status_code == 400 and "mig_mode" in unknown.json()["error"]["fields"]
    assert no_geometry.status_code == 400
    assert "no MIG geometry" in no_geometry.json()["error"]["fields"]["mig_mode"][0]
    small.refresh_from_db()
    assert small.mig_mode == ""


def test_operator_page_sets_a_layout_and_shows_a_refusal(mig_card, client, operator):
    gpu = mig_card()
    client.force_login(operator)
    url = f"/operator/nodes/{gpu.node_id}/mig/"

    refused = client.post(url, {"gpu_index": 0, "mig_layout": "4g.40gb@4"})
    done = client.post(url, {"gpu_index": 0, "mig_layout": "7g.80gb@0"})

    assert refused.status_code == 400
    assert "4g.40gb may start only at memory slice 0" in refused.content.decode()
    assert done.status_code == 302
    assert Gpu.objects.get(pk=gpu.pk).mig_layout == "7g.80gb@0"


def test_operator_pool_page_sets_the_mig_mode_and_shows_why_not(mig_card, client, operator, mig_pool, submit):
    gpu = mig_card()
    client.force_login(operator)
    url = f"/operator/pools/{mig_pool.pk}/"
    form = {"description": "", "granularity_milli": mig_pool.granularity_milli}

    assert client.post(url, form | {"mig_mode": "dynamic"}).status_code == 302
    allocate(submit(), [Slice(gpu.pk, 142, 10240, "1g.10gb@6")])
    refused = client.post(url, form | {"mig_mode": ""})

    assert "has work on its cards: drain it first" in refused.content.decode()
    mig_pool.refresh_from_db()
    assert mig_pool.mig_mode == "dynamic"
    node_page = client.get(f"/operator/nodes/{gpu.node_id}/").content.decode()
    assert f'action="/operator/nodes/{gpu.node_id}/mig/"' in node_page


# The cluster picture.


def test_cluster_picture_shows_each_instance_used_or_free(mig_card, submit, client, member, api_client):
    gpu = mig_card()
    request = submit("notebook")
    allocate(request, [Slice(gpu.pk, 428, 40960, "3g.40gb@0")])
    client.force_login(member)

    page = client.get("/cluster/nodes/", {"pool": "a100-mig"}).content.decode()
    api = api_client(member).get("/api/v1/cluster/", {"pool": "a100-mig"}).json()

    assert 'data-mig="3g.40gb@0" data-request="notebook"' in page
    assert 'data-mig="2g.20gb@4" data-free' in page and 'data-mig="1g.10gb@6" data-free' in page
    card = api["results"][0]["gpus"][0]
    assert card["mig"] == [
        {"instance": "3g.40gb@0", "slots": 4, "used": True},
        {"instance": "2g.20gb@4", "slots": 2, "used": False},
        {"instance": "1g.10gb@6", "slots": 1, "used": False},
        {"instance": "", "slots": 1, "used": False},
    ]
    assert card["slices"][0]["mig_instance"] == "3g.40gb@0"
