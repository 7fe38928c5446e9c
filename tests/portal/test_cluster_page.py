"""The cluster overview: capacity per pool, the slice picture, the queue per team, and what must not leak."""

import json

import pytest
from django.urls import reverse

from scheduler_app.choices import CapacityType, NodeStatus
from scheduler_app.services.inventory import create_pool, record_foreign_use, set_node_status
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


def picture(client, **query):
    """The cluster page and the node fragment it loads (every node, or those the query names)."""
    return client.get(reverse("cluster")).text + client.get(reverse("cluster_nodes"), query).text


@pytest.mark.parametrize("page", ["cluster", "cluster_nodes"])
def test_cluster_pages_need_login(client, db, page):
    assert client.get(reverse(page)).status_code == 302


def test_member_sees_own_slice_named_and_linked(client, member, cluster):
    client.force_login(member)

    text = picture(client)

    assert 'title="vision-train · 250 milli-GPU"' in text
    assert 'data-request="vision-train"' in text


@pytest.mark.parametrize("user", ["member", "team_admin"])
def test_other_teams_names_never_reach_the_page(client, cluster, user, request):
    client.force_login(request.getfixturevalue(user))

    text = picture(client)

    assert "secret-llm" not in text and "secret-queued" not in text
    assert 'title="other team · 500 milli-GPU"' in text


def test_outsider_sees_their_own_names_and_not_ours(client, outsider, cluster):
    client.force_login(outsider)

    text = picture(client)

    assert "secret-llm" in text and "secret-queued" in text
    assert "vision-train" not in text
    assert 'title="other team · 250 milli-GPU"' in text


def test_queue_per_team_counts_everyone_but_names_only_the_viewers(client, member, cluster):
    client.force_login(member)

    response = client.get(reverse("cluster"))

    queue = response.text.split("Queue per team")[1].split("</section>")[0]
    assert "Language</strong> — 1 pending" in queue
    assert "secret-queued" not in queue


def test_operator_sees_every_teams_names(client, operator, cluster):
    client.force_login(operator)

    text = picture(client)

    assert "secret-llm" in text and "vision-train" in text


def chart_of(response) -> list[dict]:
    return json.loads(
        response.text.split('id="pool-chart-data" type="application/json">')[1].split("</script>")[0]
    )


def test_capacity_per_pool_counts_ready_cards_only_as_free(client, member, cluster, make_node):
    drained = make_node("node-2", gpus=2)
    set_node_status(drained, NodeStatus.DRAINING, reason="maintenance")
    client.force_login(member)

    response = client.get(reverse("cluster"))

    chart = chart_of(response)
    assert chart == [{"pool": "a100", "allocated": 0.75, "foreign": 0.0, "free": 1.25, "unavailable": 2.0}]
    assert "Draining" in response.text


def test_capacity_held_outside_the_portal_is_neither_free_nor_unavailable(client, member, cluster, make_node):
    drained = make_node("node-2", gpus=2)
    set_node_status(drained, NodeStatus.DRAINING, reason="maintenance")
    record_foreign_use(cluster, {1: (500, 0)}, actor_name="slurm")
    record_foreign_use(drained, {0: (250, 0)}, actor_name="slurm")
    client.force_login(member)

    chart = chart_of(client.get(reverse("cluster")))

    assert chart == [{"pool": "a100", "allocated": 0.75, "foreign": 0.75, "free": 0.75, "unavailable": 1.75}]


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

    with django_assert_max_num_queries(14):
        page = client.get(reverse("cluster"))
    with django_assert_max_num_queries(12):
        nodes = client.get(reverse("cluster_nodes"))

    heatmap = json.loads(
        page.text.split('id="heatmap-data" type="application/json">')[1].split("</script>")[0]
    )
    assert sum(len(ids) for ids in heatmap["gpu_ids"]) == 24
    assert nodes.text.count('class="gpu"') == 24


def test_heatmap_is_one_compact_array_with_node_names_once(client, member, cluster, make_node):
    spot = create_pool(name="spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    make_node("spot-1", gpus=3, pool=spot)
    client.force_login(member)

    page = client.get(reverse("cluster")).text

    heatmap = json.loads(page.split('id="heatmap-data" type="application/json">')[1].split("</script>")[0])
    assert heatmap["pools"] == ["a100", "spot"]
    assert heatmap["nodes"] == ["node-1", "spot-1"] and heatmap["node_pool"] == [0, 1]
    assert [len(ids) for ids in heatmap["gpu_ids"]] == [2, 3]
    assert heatmap["util"] == [[None, None], [None, None, None]]  # no live frame yet
    assert 'class="gpu"' not in page  # the cards' detail loads on demand


def test_heatmap_shows_the_live_tickers_latest_util(client, member, cluster):
    from django.utils import timezone

    from scheduler_app.live.ticker import tick
    from telemetry.models import GpuSample

    card = cluster.gpus.get(index=1)
    GpuSample.objects.create(
        gpu=card,
        sampled_at=timezone.now(),
        gpu_util_percent=77,
        memory_used_mib=1,
        power_mw=1,
        temperature_c=30,
    )
    tick()
    client.force_login(member)

    page = client.get(reverse("cluster")).text

    heatmap = json.loads(page.split('id="heatmap-data" type="application/json">')[1].split("</script>")[0])
    assert heatmap["util"] == [[None, 77]]


def test_node_fragment_filters_by_pool_name_and_state_and_pages(client, member, make_node):
    spot = create_pool(name="spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    for i in range(3):
        make_node(f"od-{i}", gpus=1)
    drained = make_node("spot-7", gpus=1, pool=spot)
    set_node_status(drained, NodeStatus.DRAINING, reason="maintenance")
    make_node("spot-8", gpus=1, pool=spot)
    client.force_login(member)

    def names(**query):
        text = client.get(reverse("cluster_nodes"), query).text
        return [line.split("</span>")[0] for line in text.split('class="node-name">')[1:]]

    assert names(pool="spot") == ["spot-7", "spot-8"]
    assert names(node="-7") == ["spot-7"]
    assert names(state="draining") == ["spot-7"]
    assert names(pool="a100", state="ready") == ["od-0", "od-1", "od-2"]
    bad = client.get(reverse("cluster_nodes"), {"pool": "nope"})
    assert bad.status_code == 200 and "is not a pool" in bad.text and 'class="node-name"' not in bad.text


def test_node_fragment_pages_by_fifty(client, member, make_node):
    for i in range(52):
        make_node(f"n-{i:02}", gpus=1)
    client.force_login(member)

    first = client.get(reverse("cluster_nodes")).text
    second = client.get(reverse("cluster_nodes"), {"page": 2}).text

    assert first.count('class="node-name"') == 50 and "Page 1 of 2 (52 nodes)" in first
    assert second.count('class="node-name"') == 2 and "n-51" in second
