"""A node's agent says at registration whether it isolates its jobs; the portal keeps it, logs a change,
and shows it to operators (node list and page) and in the API (/cluster/ and /nodes/)."""

import pytest
from django.urls import reverse

from audit.models import Event
from scheduler_app.models import Gpu, Node
from tests.scheduler_app.test_agent_api import AGENT, agent_client, card

ISOLATED = {"mode": "isolated", "namespaces": True, "cgroup": "v1"}
NO_BWRAP = {"mode": "isolated", "namespaces": False, "cgroup": "v2"}
UNISOLATED = {"mode": "unisolated", "namespaces": False, "cgroup": "none"}


@pytest.fixture
def agent(node):
    """node-1's agent (tests/agent_fixtures.py: node)."""
    return agent_client(node)


def register(agent, isolation=None):
    body = {"gpus": [card("GPU-node-1-0"), card("GPU-node-1-1")]}
    if isolation is not None:
        body["isolation"] = isolation
    return agent.post(AGENT + "register/", body, format="json")


def isolation_events(node) -> list[dict]:
    events = Event.objects.filter(content_type__model="node", object_id=node.pk, to_state="isolation changed")
    return list(events.order_by("id").values_list("data", flat=True))


def test_a_node_is_unknown_until_its_agent_reports_isolation(node):
    assert node.isolation() == {"mode": "unknown", "namespaces": None, "cgroup": None}
    assert node.isolation_label() == "unknown: the agent does not report it"


def test_registration_keeps_the_reported_isolation(agent, node):
    response = register(agent, ISOLATED)

    assert response.status_code == 200, response.json()
    node.refresh_from_db()
    assert node.isolation() == ISOLATED
    assert node.isolation_label() == "isolated (cgroup v1, namespaces)"


@pytest.mark.parametrize(
    ("isolation", "label"),
    [
        (ISOLATED, "isolated (cgroup v1, namespaces)"),
        (NO_BWRAP, "isolated (cgroup v2), no namespaces (bubblewrap missing)"),
        (
            {"mode": "isolated", "namespaces": True, "cgroup": "none"},
            "isolated (namespaces), no cgroup: no CPU, memory or pids limits",
        ),
        (UNISOLATED, "unisolated: jobs run as the agent's own user, without limits (--no-isolation)"),
    ],
)
def test_the_isolation_reads_as_what_a_job_gets(agent, node, isolation, label):
    register(agent, isolation)

    node.refresh_from_db()
    assert node.isolation_label() == label


def test_an_agent_that_does_not_report_it_makes_the_node_unknown_again(agent, node):
    register(agent, ISOLATED)

    register(agent)

    node.refresh_from_db()
    assert node.isolation() == {"mode": "unknown", "namespaces": None, "cgroup": None}


def test_a_change_of_isolation_is_logged_on_the_node_and_the_same_again_is_not(agent, node):
    register(agent, ISOLATED)
    register(agent, ISOLATED)
    register(agent, UNISOLATED)

    assert isolation_events(node) == [
        {
            "isolation": {
                "from": "unknown: the agent does not report it",
                "to": "isolated (cgroup v1, namespaces)",
            }
        },
        {
            "isolation": {
                "from": "isolated (cgroup v1, namespaces)",
                "to": "unisolated: jobs run as the agent's own user, without limits (--no-isolation)",
            }
        },
    ]


@pytest.mark.parametrize(
    ("isolation", "field", "says"),
    [
        ({**ISOLATED, "mode": "sandboxed"}, "isolation.mode", "Give one of: isolated, unisolated."),
        ({**ISOLATED, "mode": "unknown"}, "isolation.mode", "Give one of: isolated, unisolated."),
        ({**ISOLATED, "mode": 1}, "isolation.mode", "Give one of"),
        ({**ISOLATED, "namespaces": "yes"}, "isolation.namespaces", "valid boolean"),
        ({**ISOLATED, "namespaces": 1}, "isolation.namespaces", "valid boolean"),
        ({**ISOLATED, "cgroup": "v3"}, "isolation.cgroup", "Give one of: v2, v1, none."),
        ({**ISOLATED, "cgroup": None}, "isolation.cgroup", "may not be null"),
        ({"mode": "isolated", "namespaces": True}, "isolation.cgroup", "required"),
        ({**ISOLATED, "seccomp": True}, "isolation", "Give exactly mode, namespaces and cgroup"),
        ("isolated", "isolation", "Expected a dictionary"),
        ([ISOLATED], "isolation", "Expected a dictionary"),
        (None, "isolation", "may not be null"),
    ],
)
def test_a_bad_isolation_report_is_refused_and_changes_nothing(agent, node, isolation, field, says):
    body = {"gpus": [card("GPU-node-1-0", mig_mode="enabled")], "isolation": isolation}

    response = agent.post(AGENT + "register/", body, format="json")

    assert response.status_code == 400, response.json()
    assert says in " ".join(response.json()["error"]["fields"][field])
    node.refresh_from_db()
    assert node.isolation_mode == "unknown" and not Gpu.objects.get(uuid="GPU-node-1-0").mig_enabled


@pytest.mark.parametrize(
    "raw",
    [
        '{"mode": "\\ud800", "namespaces": true, "cgroup": "v1"}',
        '{"mode": "isolated", "namespaces": true, "cgroup": "v1", "\\ud800": 1}',
        '{"mode": "isolated", "namespaces": true, "cgroup": "%s"}' % ("v" * 100_000),
    ],
)
def test_a_lone_surrogate_or_huge_isolation_value_is_a_clear_400(agent, node, raw):
    cards = '[{"uuid": "GPU-node-1-0", "model": "A100-80GB", "memory_mib": 81920, "mig_mode": "disabled"}]'
    body = f'{{"gpus": {cards}, "isolation": {raw}}}'

    response = agent.post(AGENT + "register/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"].keys() <= {"isolation", "isolation.mode", "isolation.cgroup"}
    assert Node.objects.get(pk=node.pk).isolation_mode == "unknown"


def test_a_bad_card_report_records_no_isolation(agent, node):
    body = {"gpus": [card("GPU-node-1-0", memory_mib=0)], "isolation": UNISOLATED}

    assert agent.post(AGENT + "register/", body, format="json").status_code == 400

    node.refresh_from_db()
    assert node.isolation_mode == "unknown" and not isolation_events(node)


def test_the_api_shows_each_nodes_isolation(agent, node, make_node, api_client, member, operator):
    register(agent, NO_BWRAP)
    make_node("node-2", gpus=1)

    cluster = api_client(member).get("/api/v1/cluster/").json()["results"]
    nodes = api_client(operator).get("/api/v1/nodes/").json()["results"]

    unknown = {"mode": "unknown", "namespaces": None, "cgroup": None}
    assert [(n["name"], n["isolation"]) for n in cluster] == [("node-1", NO_BWRAP), ("node-2", unknown)]
    assert [(n["name"], n["isolation"]) for n in nodes] == [("node-1", NO_BWRAP), ("node-2", unknown)]


def test_operators_see_isolation_on_the_node_list_and_warned_on_the_page(agent, node, client, operator):
    register(agent, UNISOLATED)
    client.force_login(operator)

    listed = client.get(reverse("operator_nodes")).text
    page = client.get(reverse("operator_node", args=[node.pk])).text

    assert 'class="badge isolation-unisolated"' in listed
    warning = page.split('<p class="isolation isolation-unisolated">')[1].split("</p>")[0]
    assert (
        warning
        == "Isolation: unisolated: jobs run as the agent&#x27;s own user, without limits (--no-isolation)"
    )


def test_a_node_without_bubblewrap_is_shown_partly_isolated(agent, node, client, operator):
    register(agent, NO_BWRAP)
    client.force_login(operator)

    listed = client.get(reverse("operator_nodes")).text
    page = client.get(reverse("operator_node", args=[node.pk])).text

    assert '<span class="badge isolation-partial"' in listed and "partly isolated" in listed
    assert "Isolation: isolated (cgroup v2), no namespaces (bubblewrap missing)" in page
    assert 'class="isolation isolation-partial"' in page
