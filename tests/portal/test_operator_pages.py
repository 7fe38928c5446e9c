"""Operator pages, staff only: drain and undrain nodes, edit pools, set quotas; each change is audited."""

import datetime as dt
import re

import pytest
from django.urls import reverse

from audit.models import Event
from scheduler_app.choices import NodeStatus
from scheduler_app.models import Node, Pool, TeamQuota
from scheduler_app.services.inventory import record_heartbeat, set_node_status
from scheduler_app.services.node_health import check_heartbeats
from teams.models import Team, UserUnixAccount
from teams.services import set_team_unix_account, set_user_unix_account

PAGES = ["operator", "operator_nodes", "operator_pools", "operator_quotas", "operator_identities"]


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2)


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("user", ["team_admin", "member", "outsider"])
def test_operator_pages_are_forbidden_to_non_staff(client, node, page, user, request):
    client.force_login(request.getfixturevalue(user))

    assert client.get(reverse(page)).status_code == 403


@pytest.mark.parametrize("page", PAGES)
def test_operator_pages_send_anonymous_users_to_log_in(client, db, page):
    response = client.get(reverse(page))

    assert response.status_code == 302 and response.url.startswith(reverse("login"))


@pytest.mark.parametrize("page", PAGES)
def test_operator_sees_each_page(client, operator, node, page):
    client.force_login(operator)

    assert client.get(reverse(page)).status_code == 200


def test_operator_drains_a_node_with_a_reason_and_it_is_audited(client, operator, node):
    client.force_login(operator)

    response = client.post(
        reverse("operator_node", args=[node.pk]), {"status": "draining", "reason": "swap PSU"}, follow=True
    )

    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINING
    assert "node-1 is now draining." in response.text
    audit = client.get(reverse("operator")).text
    assert "swap PSU" in audit and "ready → draining" in audit and "ops" in audit


def test_operator_undrains_a_node(client, operator, node):
    set_node_status(node, NodeStatus.DRAINING, reason="maintenance")
    client.force_login(operator)

    client.post(reverse("operator_node", args=[node.pk]), {"status": "ready", "reason": "fixed"})

    node.refresh_from_db()
    assert node.status == NodeStatus.READY


LAST_HEARD = dt.datetime(2025, 1, 7, 23, 6, tzinfo=dt.UTC)


@pytest.fixture
def lost_node(node, time_machine):
    """node-1, last heard from at 23:06 UTC: suspect at 23:07:30, lost by the watchdog at 23:11:30."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=LAST_HEARD)
    for at in (LAST_HEARD + dt.timedelta(seconds=90), LAST_HEARD + dt.timedelta(seconds=330)):
        time_machine.move_to(at, tick=False)
        check_heartbeats()
    node.refresh_from_db()
    return node


def test_a_lost_node_page_says_when_and_why_it_was_lost_and_how_to_resume_it(client, operator, lost_node):
    client.force_login(operator)

    page = client.get(reverse("operator_node", args=[lost_node.pk])).text

    why = page.split('id="why"')[1].split("</section>")[0]
    assert "Lost at 23:11 UTC" in why and ": no heartbeat since 23:06:00 UTC" in why
    assert "(heartbeat watchdog)" in why
    assert "start its agent again" in why and "then choose Ready below" in why
    assert "Ready (undrain, or resume)" in page


def test_a_lost_node_page_says_when_its_agent_answers_again(client, operator, lost_node, time_machine):
    time_machine.move_to(LAST_HEARD + dt.timedelta(seconds=400), tick=False)
    record_heartbeat(lost_node)
    client.force_login(operator)

    page = client.get(reverse("operator_node", args=[lost_node.pk])).text

    assert "Its agent answers again" in page.split('id="why"')[1].split("</section>")[0]


def test_a_lost_node_page_says_it_returns_by_itself_with_return_to_service(
    client, operator, lost_node, settings
):
    settings.NODE_RETURN_TO_SERVICE = True
    client.force_login(operator)

    page = client.get(reverse("operator_node", args=[lost_node.pk])).text

    assert "returns to service by itself when its agent registers again" in page


def test_operator_resumes_a_lost_node_and_it_is_audited(client, operator, lost_node):
    client.force_login(operator)

    client.post(reverse("operator_node", args=[lost_node.pk]), {"status": "ready", "reason": "PSU swapped"})

    lost_node.refresh_from_db()
    assert lost_node.status == NodeStatus.READY
    resumed = Event.objects.get(object_id=lost_node.pk, from_state="lost", to_state="ready")
    assert (resumed.actor, resumed.reason) == (operator, "PSU swapped")


def test_a_ready_node_page_has_no_status_story(client, operator, node):
    client.force_login(operator)

    assert 'id="why"' not in client.get(reverse("operator_node", args=[node.pk])).text


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"status": "draining", "reason": ""}, "reason", "This field is required."),
        ({"status": "lost", "reason": "why not"}, "status", "Select a valid choice"),
    ],
)
def test_bad_node_status_input_is_shown_inline_and_changes_nothing(
    client, operator, node, data, field, message
):
    client.force_login(operator)
    events_before = Event.objects.count()

    response = client.post(reverse("operator_node", args=[node.pk]), data)

    assert message in response.text.split(f'id="field-{field}"')[1].split('<div class="field')[0]
    node.refresh_from_db()
    assert node.status == NodeStatus.READY and Event.objects.count() == events_before


def test_member_cannot_drain_a_node(client, member, node):
    client.force_login(member)

    response = client.post(reverse("operator_node", args=[node.pk]), {"status": "draining", "reason": "x"})

    assert response.status_code == 403
    node.refresh_from_db()
    assert node.status == NodeStatus.READY


def test_operator_edits_a_pool_and_only_changed_fields_are_logged(client, operator, pool):
    client.force_login(operator)

    form = {"description": "big cards", "granularity_milli": "125", "consolidation": "on"}
    client.post(reverse("operator_pool", args=[pool.pk]), form)

    pool.refresh_from_db()
    assert pool.description == "big cards"
    assert Event.objects.get(to_state="updated").reason == "description:  → big cards"


def test_operator_turns_consolidation_off_for_a_pool(client, operator, pool):
    client.force_login(operator)
    page = client.get(reverse("operator_pool", args=[pool.pk]))
    assert re.search(r'<input type="checkbox" name="consolidation"[^>]* checked>', page.text)

    client.post(reverse("operator_pool", args=[pool.pk]), {"description": "", "granularity_milli": "125"})

    pool.refresh_from_db()
    assert pool.consolidation is False
    assert Event.objects.get(to_state="updated").reason == "consolidation: True → False"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"description": "", "granularity_milli": "0"}, "granularity_milli", "greater than or equal to 1"),
        ({"description": "", "granularity_milli": "2000"}, "granularity_milli", "less than or equal to 1000"),
        ({"description": "x" * 201, "granularity_milli": "125"}, "description", "at most 200 characters"),
    ],
)
def test_bad_pool_input_is_shown_inline_and_changes_nothing(client, operator, pool, data, field, message):
    client.force_login(operator)

    response = client.post(reverse("operator_pool", args=[pool.pk]), data)

    assert message in response.text.split(f'id="field-{field}"')[1].split('<div class="field')[0]
    assert Pool.objects.get(pk=pool.pk).granularity_milli == 125
    assert not Event.objects.filter(to_state="updated").exists()


def test_member_cannot_edit_a_pool(client, member, pool):
    client.force_login(member)

    response = client.post(
        reverse("operator_pool", args=[pool.pk]), {"description": "mine", "granularity_milli": "125"}
    )

    assert response.status_code == 403
    assert Pool.objects.get(pk=pool.pk).description == ""


def test_operator_sets_a_team_quota_and_it_is_audited(client, operator, team, pool):
    client.force_login(operator)

    response = client.post(
        reverse("operator_quotas"),
        {"team": team.pk, "pool": pool.pk, "guaranteed_milli": "4000"},
        follow=True,
    )

    assert TeamQuota.objects.get(team=team, pool=pool).guaranteed_milli == 4000
    assert "Vision is guaranteed 4000 milli-GPU on a100." in response.text
    assert "quota on a100 in milli-GPU" in client.get(reverse("operator")).text


def test_negative_quota_is_refused_by_the_service_inline(client, operator, team, pool):
    client.force_login(operator)

    response = client.post(
        reverse("operator_quotas"), {"team": team.pk, "pool": pool.pk, "guaranteed_milli": "-5"}
    )

    assert response.status_code == 400
    group = response.text.split('id="field-guaranteed_milli"')[1].split("</form>")[0]
    assert "A quota cannot be negative." in group
    assert not TeamQuota.objects.exists()


def test_team_admin_cannot_set_quotas(client, team_admin, team, pool):
    client.force_login(team_admin)

    response = client.post(
        reverse("operator_quotas"), {"team": team.pk, "pool": pool.pk, "guaranteed_milli": "9000"}
    )

    assert response.status_code == 403
    assert not TeamQuota.objects.exists()


def test_nodes_page_queries_do_not_grow(client, operator, make_node, django_assert_max_num_queries):
    for i in range(8):
        make_node(f"node-{i}", gpus=4)
    client.force_login(operator)

    with django_assert_max_num_queries(5):
        response = client.get(reverse("operator_nodes"))

    assert response.text.count("Drain…") == 8


def test_nodes_page_pages_by_fifty(client, operator, make_node):
    for i in range(51):
        make_node(f"node-{i:02}", gpus=1)
    client.force_login(operator)

    first = client.get(reverse("operator_nodes"))
    second = client.get(reverse("operator_nodes"), {"page": 2})

    assert first.text.count("Drain…") == 50 and "Page 1 of 2 (51 nodes)" in first.text
    assert second.text.count("Drain…") == 1 and "node-50" in second.text


def test_nodes_page_counts_only_open_allocations(client, operator, member, team, make_node):
    from scheduler_app.services.placement import Slice, allocate
    from scheduler_app.services.requests import release_request, submit_request

    card = make_node("node-1", gpus=2).gpus.get(index=0)
    done = submit_request(user=member, team=team, name="done", gpu_milli=500)
    allocate(done, [Slice(card.pk, 500, 1024)])
    release_request(done, user=member)
    running = submit_request(user=member, team=team, name="running", gpu_milli=250)
    allocate(running, [Slice(card.pk, 250, 1024)])
    client.force_login(operator)

    response = client.get(reverse("operator_nodes"))

    row = response.text.split(">node-1</a></td>")[1].split("</tr>")[0]
    assert '<td class="num">2</td><td class="num">250</td>' in row


def test_audit_page_queries_do_not_grow(client, operator, make_node, django_assert_max_num_queries):
    for i in range(8):
        set_node_status(make_node(f"node-{i}", gpus=1), NodeStatus.DRAINING, actor=operator, reason=f"r{i}")
    client.force_login(operator)

    with django_assert_max_num_queries(6):
        response = client.get(reverse("operator"))

    assert response.text.count("ready → draining") == 8


def test_operator_maps_a_team_to_a_unix_account_and_it_is_audited(client, operator, team):
    client.force_login(operator)

    response = client.post(
        reverse("operator_identities"), {"team-team": team.pk, "team-unix_account": "vision-svc"}, follow=True
    )

    assert Team.objects.get(pk=team.pk).unix_account == "vision-svc"
    assert "Vision&#x27;s jobs run as vision-svc." in response.text
    assert "unix_account: none → vision-svc" in client.get(reverse("operator")).text


def test_operator_maps_a_user_and_the_page_lists_who_runs_as_what(client, operator, team, other_team, member):
    set_team_unix_account(other_team, unix_account="lang", actor=operator)
    client.force_login(operator)

    response = client.post(
        reverse("operator_identity_user"),
        {"user-username": "bob", "user-unix_account": "bob_ldap"},
        follow=True,
    )

    assert UserUnixAccount.objects.get(user=member).unix_account == "bob_ldap"
    assert "bob&#x27;s jobs run as bob_ldap in every team." in response.text
    rows = response.text.split("<tbody>")
    assert "<td>Language</td>" in rows[1] and "<code>lang</code>" in rows[1]
    assert "<code>gpp-vision</code>" in rows[1]
    assert "<td>bob</td><td><code>bob_ldap</code></td>" in rows[2]
    assert "unix_account: none → bob_ldap" in client.get(reverse("operator")).text


@pytest.mark.parametrize(
    ("url", "data", "field", "message"),
    [
        ("operator_identities", {"team-unix_account": "root"}, "team-unix_account", "Jobs never run as root"),
        ("operator_identities", {"team-unix_account": "Vision"}, "team-unix_account", "Not a Unix user name"),
        (
            "operator_identities",
            {"team-unix_account": "a" * 33},
            "team-unix_account",
            "at most 32 characters",
        ),
        (
            "operator_identity_user",
            {"user-unix_account": "root"},
            "user-unix_account",
            "Jobs never run as root",
        ),
        (
            "operator_identity_user",
            {"user-unix_account": " bob"},
            "user-unix_account",
            "Not a Unix user name",
        ),
        (
            "operator_identity_user",
            {"user-username": "ghost"},
            "user-username",
            "No user named &#x27;ghost&#x27;.",
        ),
    ],
)
def test_bad_identity_input_is_shown_inline_and_changes_nothing(
    client, operator, team, member, url, data, field, message
):
    client.force_login(operator)
    data = {"team-team": team.pk, "user-username": "bob", "user-unix_account": "bob", **data}

    response = client.post(reverse(url), data)

    assert response.status_code == 400
    assert message in response.text.split(f'id="field-{field}"')[1].split("</div>")[0]
    assert Team.objects.get(pk=team.pk).unix_account == "" and not UserUnixAccount.objects.exists()


@pytest.mark.parametrize("user", ["team_admin", "member"])
def test_non_operators_cannot_map_unix_accounts_from_the_pages(client, team, member, user, request):
    client.force_login(request.getfixturevalue(user))

    team_post = client.post(reverse("operator_identities"), {"team-team": team.pk, "team-unix_account": "x"})
    user_post = client.post(
        reverse("operator_identity_user"), {"user-username": "bob", "user-unix_account": "x"}
    )

    assert (team_post.status_code, user_post.status_code) == (403, 403)
    assert Team.objects.get(pk=team.pk).unix_account == "" and not UserUnixAccount.objects.exists()


def test_removing_a_users_mapping_from_the_page_says_they_run_as_their_teams(client, operator, member):
    set_user_unix_account(member, unix_account="bob_ldap", actor=operator)
    client.force_login(operator)

    response = client.post(
        reverse("operator_identity_user"), {"user-username": "bob", "user-unix_account": ""}, follow=True
    )

    assert "bob&#x27;s jobs run as their team&#x27;s account in every team." in response.text
    assert not UserUnixAccount.objects.exists()
