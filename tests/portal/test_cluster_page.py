"""The cluster overview: capacity per pool, the slice picture, the queue per team, and what must not leak."""

import json

import pytest
from django.urls import reverse

from scheduler_app.choices import CapacityType, NodeStatus
from scheduler_app.services.inventory import create_pool, set_node_status
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request


@pytest.fixture
def cluster(team, other_team, member, outsider, make_node):
    """node-1 holds a quarter for Vision's vision-train, half for Language's secret-llm; one more waits."""
    node = make_node("node-1", gpus=2)
    gpu = node.gpus.get(index=0)
    mine = submit_request(user=member, team=team, name="vision-train", gpu_milli=250)
    theirs = submit_request(user=outsider, team=other_team, name="secret-llm", gpu_milli=500)
    allocate(mine, [Slice(gpu.id, 250, 20480)])
    allocate(theirs, [Slice(gpu.id, 500, 40960)])
    submit_request(user=outsider, team=other_team, name="secret-queued", gpu_milli=125)
    return node


def test_cluster_page_needs_login(client, db):
    assert client.get(reverse("cluster")).status_code == 302


def test_member_sees_own_slice_named_and_linked(client, member, cluster):
    client.force_login(member)

    response = client.get(reverse("cluster"))

    assert 'title="vision-train · 250 milli-GPU"' in response.text
    assert 'data-request="vision-train"' in response.text


@pytest.mark.parametrize("user", ["member", "team_admin"])
def test_other_teams_names_never_reach_the_page(client, cluster, user, request):
    client.force_login(request.getfixturevalue(user))

    response = client.get(reverse("cluster"))

    assert "secret-llm" not in response.text and "secret-queued" not in response.text
    assert 'title="other team · 500 milli-GPU"' in response.text


def test_outsider_sees_their_own_names_and_not_ours(client, outsider, cluster):
    client.force_login(outsider)

    response = client.get(reverse("cluster"))

    assert "secret-llm" in response.text and "secret-queued" in response.text
    assert "vision-train" not in response.text
    assert 'title="other team · 250 milli-GPU"' in response.text


def test_queue_per_team_counts_everyone_but_names_only_the_viewers(client, member, cluster):
    client.force_login(member)

    response = client.get(reverse("cluster"))

    queue = response.text.split("Queue per team")[1].split("</section>")[0]
    assert "Language</strong> — 1 pending" in queue
    assert "secret-queued" not in queue


def test_operator_sees_every_teams_names(client, operator, cluster):
    client.force_login(operator)

    response = client.get(reverse("cluster"))

    assert "secret-llm" in response.text and "vision-train" in response.text


def test_capacity_per_pool_counts_ready_cards_only_as_free(client, member, cluster, make_node):
    drained = make_node("node-2", gpus=2)
    set_node_status(drained, NodeStatus.DRAINING, reason="maintenance")
    client.force_login(member)

    response = client.get(reverse("cluster"))

    chart = json.loads(
        response.text.split('id="pool-chart-data" type="application/json">')[1].split("</script>")[0]
    )
    assert chart == [{"pool": "a100", "allocated": 0.75, "free": 1.25, "unavailable": 2.0}]
    assert "Draining" in response.text


def test_plotly_is_served_from_our_static_files(client, member, cluster):
    client.force_login(member)

    page = client.get(reverse("cluster"))
    script = client.get("/static/vendor/plotly/plotly.min.js")

    assert '<script src="/static/vendor/plotly/plotly.min.js"' in page.text
    assert "cdn" not in page.text.lower()
    assert script.status_code == 200
    assert b"plotly" in b"".join(script.streaming_content)[:2000].lower()


def test_cluster_page_queries_do_not_grow_with_the_cluster(
    client, team, member, pool, make_node, django_assert_max_num_queries
):
    spot = create_pool(name="spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    for i in range(6):
        node = make_node(f"node-{i}", gpus=4, pool=spot if i % 2 else pool)
        for gpu in node.gpus.all():
            request = submit_request(user=member, team=team, name=f"job-{gpu.pk}", gpu_milli=125)
            allocate(request, [Slice(gpu.id, 125, 1024)])
    client.force_login(member)

    with django_assert_max_num_queries(10):
        response = client.get(reverse("cluster"))

    assert response.text.count('class="gpu"') == 24
