"""POST/GET /api/v1/what-if/: operators only; a bad scenario gets the error envelope and writes nothing."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.choices import WhatIfStatus
from scheduler_app.models import WhatIfRun
from scheduler_app.services.whatif import run_what_if
from tests.scheduler_app.whatif_helpers import record_history

URL = "/api/v1/what-if/"


@pytest.fixture
def period(team, member, make_node, pool):
    return record_history(team, member, make_node("a100-1", gpus=1), pool)


@pytest.mark.parametrize("who", ["member", "team_admin", "outsider"])
def test_non_operators_are_refused(period, api_client, request, who):
    client = api_client(request.getfixturevalue(who))

    assert client.post(URL, period, format="json").status_code == 403
    assert client.get(URL).status_code == 403
    assert not WhatIfRun.objects.exists()


def test_anonymous_callers_are_refused(period, api_client):
    assert api_client().post(URL, period, format="json").status_code in (401, 403)
    assert not WhatIfRun.objects.exists()


def test_an_operator_queues_a_run_and_reads_its_result(
    period, operator, api_client, django_capture_on_commit_callbacks
):
    client = api_client(operator)
    with django_capture_on_commit_callbacks(execute=False):
        answer = client.post(URL, {**period, "nodes": {"a100": 1}, "target_p95_s": 60}, format="json")
    assert answer.status_code == 202
    run_id = answer.json()["id"]
    assert answer.json()["status"] == WhatIfStatus.QUEUED and answer.json()["progress"] == 0

    run_what_if(run_id)
    done = client.get(f"{URL}{run_id}/").json()

    assert done["status"] == WhatIfStatus.SUCCEEDED and done["progress"] == 100
    assert done["scenario"]["nodes"] == {"a100": 1} and done["created_by"] == "ops"
    assert done["result"]["scenario"]["gpus"] == 2 and done["result"]["actual"]["gpus"] == 1
    assert [run["id"] for run in client.get(URL).json()] == [run_id]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"start": "not a time"}, "start"),
        ({"policy": "random"}, "policy"),
        ({"nodes": {"a100": "two"}}, "nodes"),
        ({"quotas": "vision"}, "quotas"),
        ({"target_p95_s": -5}, "target_p95_s"),
    ],
)
def test_bad_input_gets_the_error_envelope_and_writes_nothing(period, operator, api_client, body, field):
    answer = api_client(operator).post(URL, {**period, **body}, format="json")

    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "validation_error" and field in error["fields"]
    assert not WhatIfRun.objects.exists()


def test_a_missing_run_is_a_404_in_the_envelope(operator, api_client):
    answer = api_client(operator).get(f"{URL}999/")

    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_listing_runs_costs_the_same_queries_however_many_there_are(
    period, operator, api_client, django_assert_num_queries, django_capture_on_commit_callbacks
):
    client = api_client(operator)
    with django_capture_on_commit_callbacks(execute=False):
        client.post(URL, period, format="json")
    client.get(URL)  # warm the token lookup's caches
    with CaptureQueriesContext(connection) as one:
        assert len(client.get(URL).json()) == 1
    queries_for_one = len(one.captured_queries)  # read now: the next request resets the log
    with django_capture_on_commit_callbacks(execute=False):
        for _ in range(3):
            client.post(URL, period, format="json")

    with django_assert_num_queries(queries_for_one):
        assert len(client.get(URL).json()) == 4
