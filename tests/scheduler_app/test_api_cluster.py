"""GET /api/v1/cluster/ at scale: capacity for the whole cluster, nodes a page at a time, filtered."""

import pytest

from scheduler_app.choices import CapacityType, NodeStatus
from scheduler_app.services.inventory import create_pool, set_node_status
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request

URL = "/api/v1/cluster/"


@pytest.fixture
def two_pools(make_node, pool):
    spot = create_pool(name="spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    for i in range(3):
        make_node(f"od-{i}", gpus=2)
    set_node_status(make_node("spot-1", gpus=4, pool=spot), NodeStatus.DRAINING, reason="maintenance")
    make_node("spot-2", gpus=4, pool=spot)
    return spot


def names(response):
    return [node["name"] for node in response.json()["results"]]


def test_cluster_pages_nodes_but_counts_capacity_for_the_whole_cluster(api_client, member, two_pools):
    client = api_client(member)

    first = client.get(URL, {"page_size": 2})
    last = client.get(URL, {"page_size": 2, "page": 3})

    assert first.status_code == 200
    assert (first.json()["count"], names(first)) == (5, ["od-0", "od-1"])
    assert first.json()["next"].endswith("page=2&page_size=2") and first.json()["previous"] is None
    assert names(last) == ["spot-2"] and last.json()["next"] is None
    capacity = {p["name"]: (p["capacity_milli"], p["free_milli"]) for p in first.json()["pools"]}
    assert capacity == {"a100": (6000, 6000), "spot": (8000, 4000)}  # the drained node's cards are not free


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"pool": "spot"}, ["spot-1", "spot-2"]),
        ({"node": "OD-1"}, ["od-1"]),
        ({"state": "draining"}, ["spot-1"]),
        ({"pool": "a100", "state": "ready", "node": "od"}, ["od-0", "od-1", "od-2"]),
        ({"pool": "spot", "state": "lost"}, []),
    ],
)
def test_cluster_filters_by_pool_node_and_state(api_client, member, two_pools, query, expected):
    response = api_client(member).get(URL, query)

    assert response.status_code == 200 and names(response) == expected
    assert all(node["pool"] == query["pool"] for node in response.json()["results"] if "pool" in query)


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"pool": "nope"}, "pool", "'nope' is not a pool."),
        ({"state": "asleep"}, "state", "'asleep' is not one of ready"),
        ({"state": ""}, "state", "'' is not one of ready"),
        ({"page_size": "0"}, "page_size", "Give a whole number from 1 to 500."),
    ],
)
def test_bad_cluster_filter_is_a_400_naming_the_field(api_client, member, two_pools, query, field, message):
    response = api_client(member).get(URL, query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert message in response.json()["error"]["fields"][field][0]


def test_cluster_page_of_nodes_shows_other_teams_work_only_as_capacity(
    api_client, member, team, outsider, other_team, two_pools
):
    from scheduler_app.models import Gpu

    card = Gpu.objects.get(node__name="spot-2", index=0)
    theirs = submit_request(user=outsider, team=other_team, name="secret-run", gpu_milli=500)
    allocate(theirs, [Slice(card.pk, 500, 1024)])

    response = api_client(member).get(URL, {"node": "spot-2"})

    (node,) = response.json()["results"]
    assert node["gpus"][0]["slices"] == [
        {"milli": 500, "label": "other team", "request_id": None, "mig_instance": ""}
    ]
    assert "secret-run" not in response.content.decode()


def test_cluster_queries_do_not_grow_with_the_page(
    api_client, member, make_node, django_assert_max_num_queries
):
    for i in range(20):
        make_node(f"n-{i:02}", gpus=8)
    client = api_client(member)

    with django_assert_max_num_queries(16):
        response = client.get(URL, {"page_size": 20})

    assert sum(len(node["gpus"]) for node in response.json()["results"]) == 160
