"""Issue 35, line 11: getting around. The operator's node list links each node and reclaims spot nodes
directly; a node's page shows its cards and the work on them; the budget page is reachable from the team
page and the navigation; finished requests show how long they ran; pool headers say each thing once; the
audit log filters (one FilterSet with its API) and pages; an operator's home page is the operator's view."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.events import log_event
from scheduler_app.choices import CapacityType, NodeStatus, RequestState
from scheduler_app.models import GpuRequest, Node
from scheduler_app.services.inventory import create_pool, set_node_status, update_pool
from scheduler_app.services.placement import PlannedStart, Slice, allocate, place
from scheduler_app.services.transitions import transition_requests

pytestmark = pytest.mark.django_db


@pytest.fixture
def spot_node(make_node):
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    return make_node("spot-1", gpus=2, pool=spot)


def running(team, user, card, milli=500, name="resnet", at=None):
    request = GpuRequest.objects.create(team=team, user=user, name=name, gpu_milli=milli)
    if at is None:
        allocate(request, [Slice(card.pk, milli, 1024)])
    else:
        place([PlannedStart(request.pk, (Slice(card.pk, milli, 1024),), "on-demand")], now=at)
    transition_requests([request.pk], RequestState.RUNNING, from_states=[RequestState.SCHEDULED], now=at)
    return request


# --- nodes ----------------------------------------------------------------------------------------------


def test_node_names_on_the_operator_node_list_link_to_their_pages(client, operator, make_node):
    node = make_node("a100-node-7", gpus=1)
    client.force_login(operator)

    page = client.get(reverse("operator_nodes")).text

    assert f'<a href="{reverse("operator_node", args=[node.pk])}">a100-node-7</a>' in page


def test_a_spot_node_is_reclaimed_straight_from_the_node_list(client, operator, make_node, spot_node):
    on_demand = make_node("od-1", gpus=1)
    client.force_login(operator)

    page = client.get(reverse("operator_nodes")).text

    assert f'action="{reverse("operator_node_reclaim", args=[spot_node.pk])}"' in page
    assert reverse("operator_node_reclaim", args=[on_demand.pk]) not in page  # only spot nodes are reclaimed
    client.post(reverse("operator_node_reclaim", args=[spot_node.pk]), {"grace_s": "120"})
    assert Node.objects.get(pk=spot_node.pk).status == NodeStatus.RECLAIMED


def test_a_node_page_shows_its_cards_and_the_work_on_them(client, operator, team, member, make_node):
    node = make_node("a100-node-1", gpus=2)
    cards = list(node.gpus.order_by("index"))
    since = timezone.now() - dt.timedelta(hours=2)
    request = running(team, member, cards[1], milli=500, name="resnet50-imagenet", at=since)
    client.force_login(operator)

    page = client.get(reverse("operator_node", args=[node.pk])).text

    cards_table = page[page.index('id="cards"') : page.index('id="work"')]
    assert cards_table.count("<tr><td>gpu") == 2 and "A100-80GB" in cards_table and "80 GiB" in cards_table
    work = page[page.index('id="work"') : page.index('id="status"')]
    assert f'href="{reverse("request_detail", args=[request.pk])}">resnet50-imagenet</a>' in work
    assert "Vision" in work and "gpu1" in work and "1/2 GPU" in work
    assert since.strftime("%b %-d, %H:%M") in work


# --- budgets ----------------------------------------------------------------------------------------------


def test_the_budget_page_is_linked_from_the_team_page_and_the_navigation(client, team, member, other_team):
    client.force_login(member)

    team_page = client.get(reverse("team_detail", args=[team.slug])).text
    budgets = client.get(reverse("budgets"))

    assert f'href="{reverse("team_budget", args=[team.slug])}"' in team_page
    assert f'href="{reverse("budgets")}"' in team_page  # the navigation, on every page
    assert budgets.status_code == 302 and budgets.url == reverse("team_budget", args=[team.slug])


def test_an_operator_gets_every_teams_spend_from_the_budgets_link(client, operator, team, other_team):
    client.force_login(operator)

    page = client.get(reverse("budgets")).text

    for slug in (team.slug, other_team.slug):
        assert f'href="{reverse("team_budget", args=[slug])}"' in page


# --- the request list ---------------------------------------------------------------------------------------


def test_finished_rows_in_the_request_list_show_how_long_they_ran(client, team, member, make_node):
    card = make_node(gpus=1).gpus.get()
    began = timezone.now() - dt.timedelta(hours=3)
    done = running(team, member, card, name="eval", at=began)
    transition_requests(
        [done.pk],
        RequestState.SUCCEEDED,
        from_states=[RequestState.RUNNING],
        now=began + dt.timedelta(minutes=65),
    )
    never = GpuRequest.objects.create(team=team, user=member, name="dropped", gpu_milli=125)
    transition_requests([never.pk], RequestState.CANCELLED, from_states=[RequestState.PENDING])
    client.force_login(member)

    page = client.get(reverse("requests")).text

    assert "ran 1 h 5 min" in page
    assert "never ran" in page


# --- the cluster page -------------------------------------------------------------------------------------


def test_a_pool_header_says_its_model_and_capacity_type_once(client, operator, member, pool, make_node):
    make_node(gpus=1)
    update_pool(pool, actor=operator, description="A100-80GB on-demand")
    client.force_login(member)

    page = client.get(reverse("cluster")).text
    header = page[page.index('id="pool-a100"') :]
    header = header[: header.index("</summary>")]

    assert "A100-80GB · on-demand · 1 GPUs" in header
    assert header.count("A100-80GB") == 1


def test_a_pool_description_that_says_more_stays_in_its_header(client, operator, member, pool, make_node):
    make_node(gpus=1)
    update_pool(pool, actor=operator, description="for training runs")
    client.force_login(member)

    page = client.get(reverse("cluster")).text

    assert "A100-80GB · on-demand · for training runs · 1 GPUs" in page


# --- the audit log ------------------------------------------------------------------------------------------


@pytest.fixture
def audited(operator, team, other_team, make_node, pool):
    """A node drained and a pool edited by ops, a change to each team (one by the system)."""
    node = make_node("a100-node-1", gpus=1)
    set_node_status(node, NodeStatus.DRAINING, actor=operator, reason="disk swap")
    update_pool(pool, actor=operator, description="training")
    log_event(team, "renamed", actor=operator, reason="team change")
    log_event(other_team, "renamed", actor_name="system", reason="other team change")
    return node


def test_the_audit_log_filters_by_who_what_team_and_day(client, operator, audited, team):
    client.force_login(operator)

    def rows(**query):
        page = client.get(reverse("operator"), query).text
        return page[page.index("<tbody>") : page.index("</tbody>")]

    assert "disk swap" in rows(what="node") and "team change" not in rows(what="node")
    assert "other team change" in rows(who="system") and "disk swap" not in rows(who="system")
    only_vision = rows(team=team.slug)
    assert "team change" in only_vision and "other team change" not in only_vision
    today = timezone.now().date()
    assert "disk swap" in rows(since=today.isoformat(), until=today.isoformat())
    assert "No changes match" in rows(until=(today - dt.timedelta(days=1)).isoformat())
    assert "not valid" in rows(what="nonsense")


def test_the_audit_log_pages_by_fifty_newest_first(client, operator, team):
    for i in range(55):
        log_event(team, "renamed", actor=operator, reason=f"change {i:02d}")
    client.force_login(operator)

    first = client.get(reverse("operator")).text
    second = client.get(reverse("operator"), {"page": 2}).text

    assert "change 54" in first and "change 04" not in first and "Page 1 of 2" in first
    assert "change 04" in second and "change 54" not in second


def test_the_audit_api_takes_the_same_filter_and_pages(api_client, operator, member, audited, team):
    answer = api_client(operator).get("/api/v1/audit/", {"what": "node", "who": "ops"})

    assert answer.status_code == 200
    body = answer.json()
    assert [e["reason"] for e in body["results"]] == ["disk swap"]
    assert body["results"][0]["what"] == "node" and body["results"][0]["subject"] == "a100-node-1"
    assert body["count"] == 1
    assert api_client(operator).get("/api/v1/audit/", {"what": "nonsense"}).status_code == 400
    assert api_client(member).get("/api/v1/audit/").status_code == 403


def test_an_audit_event_of_no_team_reads_null_as_the_schema_allows(api_client, operator, audited):
    from drf_spectacular.generators import SchemaGenerator

    answer = api_client(operator).get("/api/v1/audit/", {"what": "node"})

    assert answer.json()["results"][0]["team"] is None
    schemas = SchemaGenerator().get_schema(public=True)["components"]["schemas"]
    assert schemas["AuditEvent"]["properties"]["team"].get("nullable") is True


# --- an operator's home page ----------------------------------------------------------------------------


def test_an_operator_without_a_team_gets_the_operators_view_at_home(
    client, operator, team, member, make_node
):
    quiet = make_node("a100-node-1", gpus=2)
    lost = make_node("a100-node-2", gpus=2)
    set_node_status(lost, NodeStatus.LOST, actor=operator, reason="no heartbeat")
    waiting = GpuRequest.objects.create(
        team=team,
        user=member,
        name="big-train",
        gpu_milli=1000,
        num_gpus=8,
        pending_reason="no node has 8 free",
    )
    client.force_login(operator)

    page = client.get(reverse("home")).text

    assert "You are in no team yet" not in page
    capacity = page[page.index('id="operator-capacity"') : page.index('id="operator-attention"')]
    assert "a100" in capacity and '<td class="num">4</td>' in capacity  # 2 nodes x 2 cards
    attention = page[page.index('id="operator-attention"') : page.index('id="operator-queue"')]
    assert "a100-node-2" in attention and "Lost" in attention and quiet.name not in attention
    queue = page[page.index('id="operator-queue"') :]
    assert f'href="{reverse("request_detail", args=[waiting.pk])}">big-train</a>' in queue
    assert "no node has 8 free" in queue and "(1 pending)" in queue


def test_a_member_without_a_team_is_still_told_to_ask_for_one(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("newcomer", password="pw-new-123"))

    page = client.get(reverse("home")).text

    assert "You are in no team yet" in page and "operator-capacity" not in page
