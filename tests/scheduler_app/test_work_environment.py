"""What a node's agent is given to put in a job's environment: the team's secrets, decrypted, and the
request's own variables (winning over a secret of the same name), only for the work on that node."""

import logging

import pytest
from cryptography.fernet import Fernet
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from teams.services import set_team_secret
from tests.scheduler_app.test_agent_api import agent_client

WORK = "/api/v1/agent/work/"


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=4)


@pytest.fixture
def other_node(make_node):
    return make_node("node-2", gpus=1)


@pytest.fixture
def place(member, team, node):
    """place(environment={}, team=team, user=member, on=node) -> a request scheduled on a free card."""

    def make(environment=None, *, for_team=team, user=member, on=node):
        request = submit_request(
            user=user, team=for_team, name="job", gpu_milli=1000, environment=environment or {}
        )
        gpu = on.gpus.filter(allocations__isnull=True).order_by("index").first()
        allocate(request, [Slice(gpu.pk, 1000, 10240)])
        return request

    return make


@pytest.fixture
def secrets(team, team_admin):
    set_team_secret(team, name="HF_TOKEN", value="hf-team-token", actor=team_admin)
    set_team_secret(team, name="MODE", value="from-secret", actor=team_admin)


def environments(node) -> dict[int, dict]:
    return {item["request_id"]: item["environment"] for item in agent_client(node).get(WORK).json()}


def test_a_job_gets_its_teams_secrets_and_its_own_variables_which_win(node, place, secrets):
    request = place({"MODE": "from-request", "LR": "3e-4"})

    assert environments(node) == {
        request.pk: {"HF_TOKEN": "hf-team-token", "MODE": "from-request", "LR": "3e-4"}
    }


def test_a_job_of_a_team_without_secrets_gets_only_its_own_variables(node, place):
    request = place({"LR": "3e-4"})

    assert environments(node) == {request.pk: {"LR": "3e-4"}}


def test_each_job_gets_only_its_own_teams_secrets(node, place, secrets, other_team, outsider):
    other_team.memberships.filter(user=outsider).update(role="team_admin")
    set_team_secret(other_team, name="HF_TOKEN", value="language-token", actor=outsider)
    ours = place()
    theirs = place(for_team=other_team, user=outsider)

    assert environments(node) == {
        ours.pk: {"HF_TOKEN": "hf-team-token", "MODE": "from-secret"},
        theirs.pk: {"HF_TOKEN": "language-token"},
    }


def test_another_nodes_agent_never_sees_the_secrets(node, other_node, place, secrets):
    place()

    response = agent_client(other_node).get(WORK)

    assert response.json() == []
    assert "hf-team-token" not in response.text


def test_the_work_list_reads_the_same_number_of_queries_however_many_requests_and_teams(
    node, place, secrets, other_team, outsider
):
    place({"A": "1"})
    agent = agent_client(node)
    agent.get(WORK)  # the credential's first use writes its last-used time; count what follows
    with CaptureQueriesContext(connection) as one:
        agent.get(WORK)
    other_team.memberships.filter(user=outsider).update(role="team_admin")
    set_team_secret(other_team, name="KEY", value="language-key", actor=outsider)
    for _ in range(2):
        place()
    place(for_team=other_team, user=outsider)

    with CaptureQueriesContext(connection) as four:
        work = agent.get(WORK).json()

    assert len(work) == 4
    assert len(four) == len(one)


def test_a_secret_no_key_opens_is_left_out_and_logged(node, place, secrets, settings, caplog):
    request = place({"LR": "3e-4"})
    settings.TEAM_SECRETS_KEYS = [Fernet.generate_key().decode()]  # the old key dropped too early

    with caplog.at_level(logging.ERROR, logger="teams.selectors"):
        assert environments(node) == {request.pk: {"LR": "3e-4"}}

    assert "secret HF_TOKEN cannot be decrypted" in caplog.text
    assert "hf-team-token" not in caplog.text
