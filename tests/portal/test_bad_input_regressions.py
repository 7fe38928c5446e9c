"""Issue 36, "500s on bad input": every place it found answers a clear 400 in the error envelope, naming
the field at fault, and changes nothing. One test per finding, over the places it listed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from audit.models import Event
from billing_app.models import Budget, PoolPrice, SpotFeed
from scheduler_app.choices import CapacityType
from scheduler_app.models import Gpu, GpuRequest, Node, Pool, WhatIfRun
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.requests import submit_request
from teams.models import Membership
from tests.scheduler_app.test_agent_api import agent_client

ROOT = Path(__file__).resolve().parents[2]
JSON = "application/json"
SURROGATE_MESSAGE = "A value cannot hold lone surrogates (text that is not valid Unicode)."


@pytest.fixture
def cluster(make_node, member, team):
    """node-1 (on-demand pool a100), spot-1 (spot pool a100-spot) and a pending request of the member's."""
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    return {
        "node": make_node("node-1", gpus=1),
        "spot_node": make_node("spot-1", gpus=1, pool=spot),
        "request": submit_request(user=member, team=team, name="train", gpu_milli=250, command="python t.py"),
    }


@pytest.fixture
def client_of(api_client, member, team_admin, operator, cluster):
    """client_of("member" | "team_admin" | "operator" | "agent") -> an API client acting as that one."""
    clients = {
        "member": api_client(member),
        "team_admin": api_client(team_admin),
        "operator": api_client(operator),
        "agent": agent_client(cluster["node"]),
    }
    return clients.__getitem__


def footprint() -> dict:
    """What a refused call must leave as it was."""
    return {
        "events": Event.objects.count(),
        "requests": list(GpuRequest.objects.order_by("pk").values_list("pk", "task_type", "billing_mode")),
        "members": list(Membership.objects.order_by("pk").values_list("user_id", "role")),
        "budgets": Budget.objects.count(),
        "feeds": SpotFeed.objects.count(),
        "prices": PoolPrice.objects.count(),
        "what_ifs": WhatIfRun.objects.count(),
        "pools": list(Pool.objects.order_by("name").values_list("name", "mig_mode")),
        "nodes": list(Node.objects.order_by("name").values_list("name", "status", "reclaim_deadline")),
        "gpus": list(Gpu.objects.order_by("uuid").values_list("uuid", "mig_enabled")),
    }


def refused(response, field: str) -> list[str]:
    """The messages of a 400 in the error envelope for `field` (the test fails unless there are some)."""
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == JSON
    error = response.json()["error"]
    assert error["code"] == "validation_error" and error["message"].startswith(f"{field}: ")
    assert error["fields"][field]
    return error["fields"][field]


# Raw JSON text, VALUE standing for the value sent: \ud800 (written "\\ud800" here) is the escape a client
# sends for half a surrogate pair; json.dumps would write a Python lone surrogate the same way.
JOB = '"name": "x", "gpu_milli": 250'
CARD = '{"uuid": "GPU-node-1-0", "model": "A100-80GB", "memory_mib": 81920, "mig_mode": VALUE}'
CHOICES = [
    ("member", "post", "/api/v1/requests/", f'{{{JOB}, "task_type": VALUE}}', "task_type"),
    ("member", "post", "/api/v1/requests/", f'{{{JOB}, "billing_mode": VALUE}}', "billing_mode"),
    ("member", "post", "/api/v1/requests/estimate/", f'{{{JOB}, "task_type": VALUE}}', "task_type"),
    ("member", "post", "/api/v1/requests/estimate/", f'{{{JOB}, "billing_mode": VALUE}}', "billing_mode"),
    ("member", "post", "/api/v1/requests/recommend/", '{"task_type": VALUE}', "task_type"),
    ("member", "post", "/api/v1/requests/{request}/billing-mode/", '{"billing_mode": VALUE}', "billing_mode"),
    (
        "team_admin",
        "put",
        "/api/v1/teams/vision/budget/",
        '{"monthly_usd": "9.00", "policy": VALUE}',
        "policy",
    ),
    ("team_admin", "post", "/api/v1/teams/vision/members/", '{"username": "ops", "role": VALUE}', "role"),
    ("operator", "patch", "/api/v1/pools/a100/", '{"mig_mode": VALUE}', "mig_mode"),
    ("operator", "put", "/api/v1/pools/a100-spot/spot-feed/", '{"kind": VALUE}', "kind"),
    ("agent", "post", "/api/v1/agent/register/", f'{{"gpus": [{CARD}]}}', "gpus.0.mig_mode"),
]


@pytest.mark.parametrize(
    ("who", "method", "url", "body", "field"), CHOICES, ids=[f"{c[1]} {c[2]} {c[4]}" for c in CHOICES]
)
@pytest.mark.parametrize("value", ['"\\ud800"', '"training\\udfff"'], ids=["alone", "trailing"])
def test_1_a_lone_surrogate_in_a_choice_is_a_clear_400_and_changes_nothing(
    cluster, client_of, who, method, url, body, field, value
):
    before = footprint()

    response = getattr(client_of(who), method)(
        url.format(request=cluster["request"].pk), body.replace("VALUE", value), content_type=JSON
    )

    assert refused(response, field) == [SURROGATE_MESSAGE]
    assert footprint() == before


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (f'{{{JOB}, "\\ud800": "training"}}', "non_field_errors", "A key cannot"),
        (f'{{{JOB}, "environment": {{"A\\ud800": "1"}}}}', "environment", "A key cannot"),
        (f'{{{JOB}, "environment": {{"A": "\\ud800"}}}}', "environment.A", "A value cannot"),
    ],
)
def test_1_a_lone_surrogate_in_any_key_or_string_is_refused_where_it_is(client_of, body, field, message):
    before = footprint()

    response = client_of("member").post("/api/v1/requests/", body, content_type=JSON)

    assert refused(response, field)[0].startswith(message)
    assert footprint() == before


def test_1_bytes_that_are_no_utf_8_in_a_query_or_an_upload_never_become_a_lone_surrogate(cluster, client_of):
    """Django decodes query strings and form fields with replacement characters, and the price upload
    refuses a file that is not UTF-8: neither can carry a lone surrogate into an answer."""
    before = footprint()
    boundary = "x-boundary"
    upload = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="pool"\r\n\r\na100-spot\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="p.csv"\r\n\r\n'
        "effective_from,usd_per_gpu_hour\n2099-01-01T00:00:00Z,1.00"
    ).encode() + f"\xed\xa0\x80\r\n--{boundary}--\r\n".encode("latin-1")

    queried = client_of("member").get("/api/v1/requests/?state=%ED%A0%80&task_type=%ED%A0%80")
    uploaded = client_of("operator").post(
        "/api/v1/prices/upload/", upload, content_type=f"multipart/form-data; boundary={boundary}"
    )

    assert "is not one of pending" in refused(queried, "state")[0]
    assert refused(uploaded, "file") == ["The file is not UTF-8 text."]
    assert footprint() == before


DAY = {"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}


@pytest.mark.parametrize(
    ("scenario", "field", "says"),
    [
        (DAY | {"policy": [1]}, "policy", "Unknown policy"),
        (DAY | {"queue": {"a": 1}}, "queue", "Unknown queue mode"),
        (DAY | {"quotas": [{"team": [1], "pool": "a100", "guaranteed_milli": 1000}]}, "quotas", "No team"),
        (
            DAY | {"quotas": [{"team": "vision", "pool": {"a": 1}, "guaranteed_milli": 1}]},
            "quotas",
            "No pool",
        ),
        (DAY | {"start": "2020-13-45T00:00:00Z"}, "start", "no real date and time"),
        (DAY | {"start": "2020-01-01T00:00:00+99:00"}, "start", "no real date and time"),
        (DAY | {"start": 20200101}, "start", "not an ISO 8601 date and time"),
        (DAY | {"end": "9999-12-31T23:59:59-23:59"}, "end", "out of range"),
        ({"start": "0001-01-01T00:00:00+01:00", "end": "0001-01-02T00:00:00Z"}, "start", "out of range"),
    ],
    ids=["policy", "queue", "quota-team", "quota-pool", "month-13", "offset-99h", "number", "9999", "year-1"],
)
def test_2_a_bad_what_if_scenario_is_a_400_naming_the_field(cluster, client_of, scenario, field, says):
    before = footprint()

    response = client_of("operator").post("/api/v1/what-if/", scenario, format="json")

    assert says in refused(response, field)[0]
    assert footprint() == before


TELEMETRY = [
    "/api/v1/pools/a100/telemetry/",
    "/api/v1/teams/vision/telemetry/",
    "/api/v1/requests/{request}/telemetry/",
    "/api/v1/gpus/{gpu}/telemetry/",
]


def telemetry_url(url: str, cluster) -> str:
    return url.format(request=cluster["request"].pk, gpu=cluster["node"].gpus.get().pk)


@pytest.mark.parametrize("url", TELEMETRY)
@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("end=0001-01-01T00:00:00Z", "end", "out of range"),
        ("end=9999-12-31T23:59:59-23:59", "end", "out of range"),
        ("end=9999-12-31T23:59:59Z", "end", "out of range"),
        ("start=0001-01-01T00:00:00Z&end=0001-01-01T00:30:00Z", "start", "out of range"),
        ("start=0001-01-01T00:00:00%2B01:00", "start", "out of range"),
        ("end=2020-13-45T00:00:00Z", "end", "no real date and time"),
        ("end=2020-01-01T00:00:00%2B99:00", "end", "no real date and time"),
        ("end=2020-01-01T00:00:00", "end", "has no timezone"),
    ],
)
def test_3_telemetry_refuses_a_time_out_of_range_with_a_400_naming_it(
    cluster, client_of, url, query, field, says
):
    response = client_of("operator").get(f"{telemetry_url(url, cluster)}?{query}")

    assert says in refused(response, field)[0]


@pytest.mark.parametrize("url", TELEMETRY)
@pytest.mark.parametrize(
    "query", ["start=1970-01-01T00:00:00Z&end=1970-01-01T01:00:00Z", "end=2999-12-31T23:59:59.999999Z"]
)
def test_3_telemetry_answers_at_the_edges_of_the_range(cluster, client_of, url, query):
    assert client_of("operator").get(f"{telemetry_url(url, cluster)}?{query}").status_code == 200


HEADER = "effective_from,usd_per_gpu_hour\n"
LONG = "1" * 131_073  # one past csv's field limit


@pytest.mark.parametrize(
    ("csv_text", "says"),
    [
        (
            HEADER + "2099-01-01T00:00:00Z,1.00\n9999-12-31T23:59:59-23:59,1.00\n",
            "line 3: effective_from '9999-12-31T23:59:59-23:59' is out of range: give a time from 1970-01-01 "
            "to 2999-12-31 (UTC).",
        ),
        (
            HEADER + "0001-01-01T00:00:00+01:00,1.00\n",
            "line 2: effective_from '0001-01-01T00:00:00+01:00' is out of range: give a time from 1970-01-01 "
            "to 2999-12-31 (UTC).",
        ),
        (
            HEADER + "2099-01-01T00:00:00+99:00,1.00\n",
            "line 2: effective_from '2099-01-01T00:00:00+99:00' is no real date and time: check the month, "
            "the day, the hour and the offset (under 24 hours).",
        ),
        (
            HEADER + f"2099-01-01T00:00:00Z,1.00\n2099-01-02T00:00:00Z,{LONG}\n",
            "line 3: not readable as CSV (field larger than field limit (131072)).",
        ),
        (f"effective_from,{LONG}\n", "line 1: not readable as CSV (field larger than field limit (131072))."),
    ],
    ids=["9999-offset", "year-1-offset", "offset-99h", "long-price", "long-header"],
)
def test_4_a_price_file_with_a_time_out_of_range_or_a_huge_field_is_a_400_naming_the_line(
    cluster, client_of, csv_text, says
):
    before = footprint()
    upload = SimpleUploadedFile("prices.csv", csv_text.encode(), content_type="text/csv")

    response = client_of("operator").post(
        "/api/v1/prices/upload/", {"file": upload, "pool": "a100-spot"}, format="multipart"
    )

    assert refused(response, "file") == [says]
    assert footprint() == before


# Run in a fresh process (manage.py shell): drf-spectacular loads its extensions once per process.
SIXTEEN_FIRST_SCHEMA_CALLS = """
import threading

from django.urls import resolve
from rest_framework.test import APIRequestFactory

view = resolve("/api/v1/schema/").func
together = threading.Barrier(16)
answers = []


def call():
    request = APIRequestFactory().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    together.wait()
    try:
        answers.append(view(request).render().status_code)
    except Exception as error:
        answers.append(repr(error))


threads = [threading.Thread(target=call) for _ in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(answers)
"""


def test_5_sixteen_first_schema_calls_at_once_all_answer_200():
    services = {"DATABASE_URL", "REDIS_URL"}  # the schema needs neither
    env = {name: value for name, value in os.environ.items() if name not in services}

    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", SIXTEEN_FIRST_SCHEMA_CALLS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([200] * 16), done.stdout


@pytest.mark.parametrize(
    "deadline",
    ["0001-01-01T00:00:00Z", "2020-01-01T00:00:00Z", "1970-01-01T00:00:00Z"],
    ids=["year-1", "2020", "1970"],
)
def test_6_a_reclaim_deadline_in_the_past_is_a_400_and_the_node_stays_as_it_was(cluster, client_of, deadline):
    before = footprint()

    response = client_of("operator").post(
        f"/api/v1/nodes/{cluster['spot_node'].pk}/reclaim/", {"deadline": deadline}, format="json"
    )

    assert refused(response, "deadline")
    assert footprint() == before


def test_6_a_reclaim_without_a_deadline_still_gives_the_default_grace(cluster, client_of, settings):
    response = client_of("operator").post(
        f"/api/v1/nodes/{cluster['spot_node'].pk}/reclaim/", {}, format="json"
    )

    spot_node = Node.objects.get(pk=cluster["spot_node"].pk)
    assert response.status_code == 200 and spot_node.status == "reclaimed"
    left = (spot_node.reclaim_deadline - timezone.now()).total_seconds()
    assert settings.RECLAIM_DEFAULT_GRACE_S - 10 < left <= settings.RECLAIM_DEFAULT_GRACE_S


# Other places that read a time from user input, found while fixing the above.

STATEMENTS = ["/api/v1/teams/vision/statement/", "/api/v1/teams/vision/statement.csv", "/api/v1/statements/"]


@pytest.mark.parametrize("url", STATEMENTS)
@pytest.mark.parametrize(
    ("month", "says"),
    [
        ("9999-12", "'9999-12' is out of range: give a time from 1970-01-01 to 2999-12-31 (UTC)."),
        ("0001-01", "'0001-01' is out of range: give a time from 1970-01-01 to 2999-12-31 (UTC)."),
        ("0000-01", "'0000-01' is not a month; give it as YYYY-MM, such as 2026-03."),
    ],
)
def test_a_statement_month_out_of_range_is_a_400_naming_month(cluster, client_of, url, month, says):
    assert refused(client_of("operator").get(f"{url}?month={month}"), "month") == [says]


@pytest.mark.parametrize("month", ["9999-12", "0001-01", "0000-01"])
def test_the_statement_page_refuses_a_month_out_of_range(client, member, team, month):
    client.force_login(member)

    response = client.get(f"/teams/vision/statement.csv?month={month}")

    assert response.status_code == 400 and f"'{month}' is" in response.text


@pytest.mark.parametrize("when", ["9999-12-31 23:59:59", "3000-01-01 00:00"])
def test_the_pool_price_page_refuses_a_start_out_of_range(client, operator, pool, when):
    client.force_login(operator)
    before = footprint()

    response = client.post(
        "/operator/pools/", {"pool": pool.pk, "usd_per_gpu_hour": "2.00", "effective_from": when}
    )

    assert response.status_code == 400 and "This time is out of range" in response.text
    assert footprint() == before


@pytest.mark.parametrize(
    ("start", "end"), [("0001-01-01 00:00", "0001-01-02 00:00"), ("9999-12-30 00:00", "9999-12-31 23:59")]
)
def test_the_what_if_page_refuses_a_period_out_of_range(client, operator, pool, start, end):
    client.force_login(operator)
    before = footprint()

    response = client.post(
        "/operator/what-if/", {"start": start, "end": end, "policy": "pack", "queue": "fair"}
    )

    assert response.status_code == 400 and "This time is out of range" in response.text
    assert footprint() == before
