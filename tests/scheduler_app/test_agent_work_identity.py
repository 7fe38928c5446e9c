"""The agent's work list says who each job runs as and its host limits: the submitting user, the Unix
account (the user's mapping, else the team's, else empty for the agent's own per-team identity), and the
request's CPU and host memory for the job's cgroup."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from teams.services import set_team_unix_account, set_user_unix_account
from tests.scheduler_app.test_agent_api import AGENT, agent_client


def place(user, team, node, *, card=0, name="job", **fields):
    request = submit_request(user=user, team=team, name=name, gpu_milli=125, **fields)
    allocate(request, [Slice(node.gpus.get(index=card).pk, 125, 1024)])
    return request


def work_of(node) -> dict[int, dict]:
    return {item["request_id"]: item for item in agent_client(node).get(AGENT + "work/").json()}


def test_work_names_the_submitting_user_and_the_jobs_host_cpu_and_memory(make_node, member, team):
    node = make_node("node-1", gpus=1)
    request = place(member, team, node, cpu_milli=2500, memory_mib=12288)

    item = work_of(node)[request.pk]

    assert (item["user"], item["cpu_milli"], item["memory_mib"]) == ("bob", 2500, 12288)


def test_work_runs_a_job_as_the_users_mapping_else_the_teams_else_the_agents_default(
    make_node, team, team_admin, member, operator
):
    node = make_node("node-1", gpus=2)
    by_admin = place(team_admin, team, node, card=0, name="by-alice")
    by_member = place(member, team, node, card=1, name="by-bob")
    unmapped = work_of(node)

    set_team_unix_account(team, unix_account="vision-svc", actor=operator)
    team_mapped = work_of(node)
    set_user_unix_account(member, unix_account="bob_ldap", actor=operator)
    user_mapped = work_of(node)

    assert (unmapped[by_admin.pk]["unix_account"], unmapped[by_member.pk]["unix_account"]) == ("", "")
    assert (
        team_mapped[by_admin.pk]["unix_account"] == team_mapped[by_member.pk]["unix_account"] == "vision-svc"
    )
    assert (user_mapped[by_admin.pk]["unix_account"], user_mapped[by_member.pk]["unix_account"]) == (
        "vision-svc",
        "bob_ldap",
    )


def test_work_queries_do_not_grow_with_the_requests_or_their_mappings(
    make_node, team, other_team, member, outsider, operator
):
    node = make_node("node-1", gpus=4)
    agent = agent_client(node)
    place(member, team, node, card=0)
    with CaptureQueriesContext(connection) as one:
        agent.get(AGENT + "work/")
    set_team_unix_account(team, unix_account="vision-svc", actor=operator)
    set_user_unix_account(outsider, unix_account="mallory", actor=operator)
    place(member, team, node, card=1)
    place(outsider, other_team, node, card=2)
    place(outsider, other_team, node, card=3)

    with CaptureQueriesContext(connection) as four:
        items = agent.get(AGENT + "work/").json()

    assert sorted(item["unix_account"] for item in items) == [
        "mallory",
        "mallory",
        "vision-svc",
        "vision-svc",
    ]
    assert len(four.captured_queries) == len(one.captured_queries)
