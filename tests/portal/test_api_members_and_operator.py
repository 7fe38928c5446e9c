"""Team members, quotas, nodes and pools over the API: the same actions and rules as the pages."""

import pytest

from audit.models import Event
from scheduler_app.models import Node, Pool, TeamQuota
from teams.models import Membership


def test_members_list_for_the_team_and_404_for_outsiders(api_client, team, team_admin, member, outsider):
    names = [m["username"] for m in api_client(member).get("/api/v1/teams/vision/members/").json()]
    assert names == ["alice", "bob"]
    assert api_client(outsider).get("/api/v1/teams/vision/members/").status_code == 404


def test_team_admin_adds_changes_and_removes_a_member(api_client, team, team_admin, member, outsider):
    client = api_client(team_admin)

    added = client.post("/api/v1/teams/vision/members/", {"username": "mallory"}, format="json")
    assert added.status_code == 201 and added.json()["role"] == "member"
    changed = client.patch(
        f"/api/v1/teams/vision/members/{added.json()['id']}/", {"role": "team_admin"}, format="json"
    )
    assert changed.json()["role"] == "team_admin"
    removed = client.delete(f"/api/v1/teams/vision/members/{added.json()['id']}/")
    assert removed.status_code == 204
    assert not Membership.objects.filter(team=team, user=outsider).exists()


def test_member_cannot_manage_members(api_client, team, team_admin, member, outsider):
    response = api_client(member).post(
        "/api/v1/teams/vision/members/", {"username": "mallory"}, format="json"
    )
    assert response.status_code == 403
    assert not Membership.objects.filter(team=team, user=outsider).exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"username": "ghost"}, "username"), ({"username": "mallory", "role": "owner"}, "role")],
)
def test_bad_member_input_names_the_field(api_client, team, team_admin, outsider, payload, field):
    response = api_client(team_admin).post("/api/v1/teams/vision/members/", payload, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"]
    assert Membership.objects.filter(team=team).count() == 1


def test_last_admin_cannot_step_down(api_client, team, team_admin):
    membership = Membership.objects.get(user=team_admin)
    response = api_client(team_admin).patch(
        f"/api/v1/teams/vision/members/{membership.pk}/", {"role": "member"}, format="json"
    )
    assert response.status_code == 400
    assert "at least one team admin" in response.json()["error"]["message"]


def test_only_operators_set_quotas(api_client, team, team_admin, operator, pool):
    refused = api_client(team_admin).put(
        "/api/v1/teams/vision/quotas/a100/", {"guaranteed_milli": 4000}, format="json"
    )
    assert refused.status_code == 403

    done = api_client(operator).put(
        "/api/v1/teams/vision/quotas/a100/", {"guaranteed_milli": 4000}, format="json"
    )

    assert done.json() == [{"pool": "a100", "guaranteed_milli": 4000, "used_milli": 0, "borrowed_milli": 0}]
    assert TeamQuota.objects.get().guaranteed_milli == 4000
    bad = api_client(operator).put(
        "/api/v1/teams/vision/quotas/a100/", {"guaranteed_milli": -1}, format="json"
    )
    assert bad.status_code == 400 and "guaranteed_milli" in bad.json()["error"]["fields"]
    assert (
        api_client(operator)
        .put("/api/v1/teams/vision/quotas/h100/", {"guaranteed_milli": 1}, format="json")
        .status_code
        == 404
    )


@pytest.mark.parametrize("who", ["team_admin", "member", "outsider"])
def test_nodes_are_for_operators_only(api_client, make_node, request, who):
    node = make_node()
    client = api_client(request.getfixturevalue(who))
    assert client.get("/api/v1/nodes/").status_code == 403
    assert client.post(f"/api/v1/nodes/{node.pk}/drain/", {}, format="json").status_code == 403
    node.refresh_from_db()
    assert node.status == "ready"


def test_operator_drains_and_undrains_with_a_logged_reason(
    api_client, make_node, operator, django_assert_max_num_queries
):
    for n in range(3):
        make_node(f"node-{n}")
    node = Node.objects.get(name="node-1")
    client = api_client(operator)

    drained = client.post(f"/api/v1/nodes/{node.pk}/drain/", {"reason": "firmware update"}, format="json")

    assert drained.json()["status"] == "draining"
    assert Event.objects.filter(
        object_id=node.pk, to_state="draining", reason="firmware update", actor=operator
    )
    assert client.post(f"/api/v1/nodes/{node.pk}/undrain/", {}, format="json").json()["status"] == "ready"
    with django_assert_max_num_queries(6):
        listed = client.get("/api/v1/nodes/").json()["results"]
    assert [n["name"] for n in listed] == ["node-0", "node-1", "node-2"]
    assert listed[0]["gpu_count"] == 4


def test_pools_listed_for_all_changed_by_operators(api_client, pool, member, operator):
    assert api_client(member).get("/api/v1/pools/").json()[0]["name"] == "a100"
    assert (
        api_client(member).patch("/api/v1/pools/a100/", {"granularity_milli": 250}, format="json").status_code
        == 403
    )

    changed = api_client(operator).patch("/api/v1/pools/a100/", {"granularity_milli": 250}, format="json")

    assert changed.json()["granularity_milli"] == 250
    bad = api_client(operator).patch("/api/v1/pools/a100/", {"granularity_milli": 0}, format="json")
    assert bad.status_code == 400 and "granularity_milli" in bad.json()["error"]["fields"]
    empty = api_client(operator).patch("/api/v1/pools/a100/", {}, format="json")
    assert empty.status_code == 400
    assert Pool.objects.get().granularity_milli == 250


def test_an_operator_switches_a_pools_consolidation_off_through_the_api(api_client, pool, operator):
    changed = api_client(operator).patch("/api/v1/pools/a100/", {"consolidation": False}, format="json")
    assert changed.status_code == 200 and changed.json()["consolidation"] is False
    bad = api_client(operator).patch("/api/v1/pools/a100/", {"consolidation": "no"}, format="json")
    assert bad.status_code == 400 and "consolidation" in bad.json()["error"]["fields"]
    assert Pool.objects.get().consolidation is False


def test_options_on_team_actions_describes_without_error(api_client, team, team_admin, pool):
    response = api_client(team_admin).options("/api/v1/teams/vision/quotas/a100/")
    assert response.status_code == 200
