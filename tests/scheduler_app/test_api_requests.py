"""/api/v1/requests/ and /api/v1/cluster/: every page action, for the three users, in one error format."""

import datetime as dt

import pytest

from audit.models import Event
from scheduler_app.models import GpuRequest, Node
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import submit_request

URL = "/api/v1/requests/"
GOOD = {"name": "train", "task_type": "training", "gpu_milli": 250}


@pytest.fixture
def cluster(make_node):
    return make_node(gpus=2)


@pytest.fixture
def theirs(other_team, outsider, cluster):
    return submit_request(
        user=outsider, team=other_team, name="secret-project", task_type="training", gpu_milli=500
    )


def test_anonymous_gets_401_in_the_error_format(db, api_client):
    response = api_client().get(URL)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Bearer"


def test_member_submits_with_a_token(api_client, member, team, cluster):
    response = api_client(member).post(URL, GOOD, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["state"], body["team"], body["share"], body["user"]) == (
        "pending",
        "vision",
        "1/4 GPU",
        "bob",
    )
    assert GpuRequest.objects.get().name == "train"


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"gpu_milli": -5}, "gpu_milli", "greater than or equal to 1"),
        ({"gpu_milli": 1001}, "gpu_milli", "less than or equal to 1000"),
        ({"gpu_milli": "half"}, "gpu_milli", "A valid integer is required"),
        ({"gpu_milli": 500, "num_gpus": 2}, "gpu_milli", "whole cards"),
        ({"pool": "h100"}, "pool", "No pool named 'h100'"),
        ({"team": "language"}, "team", "You are in no team 'language'"),
        ({"billing_mode": "spot"}, "checkpoint_interval_s", "must declare a checkpoint interval"),
        ({"task_type": "mining"}, "task_type", "Give one of: training, inference."),
        ({"name": ""}, "name", "may not be blank"),
        ({"name": 7}, "name", "Not a valid string"),
        ({"gpu_milli": "250"}, "gpu_milli", "A valid integer is required"),
        ({"allow_on_demand_fallback": "yes"}, "allow_on_demand_fallback", "Must be a valid boolean"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(
    api_client, member, cluster, payload, field, message
):
    events = Event.objects.count()

    response = api_client(member).post(URL, GOOD | payload, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert message in " ".join(error["fields"][field])
    assert error["message"].startswith(f"{field}: ")
    assert not GpuRequest.objects.exists()
    assert Event.objects.count() == events


def test_member_of_several_teams_must_name_one(api_client, member, other_team, cluster):
    from teams.models import Membership

    Membership.objects.create(team=other_team, user=member)
    response = api_client(member).post(URL, GOOD, format="json")
    assert response.status_code == 400
    assert "several" in response.json()["error"]["fields"]["team"][0]


def test_list_shows_only_own_teams_requests_with_constant_queries(
    api_client, member, team, theirs, django_assert_max_num_queries
):
    for i in range(5):
        submit_request(user=member, team=team, name=f"mine-{i}", task_type="training", gpu_milli=125)
    run_scheduling_pass()
    client = api_client(member)

    with django_assert_max_num_queries(8):
        response = client.get(URL)

    names = [r["name"] for r in response.json()["results"]]
    assert sorted(names) == [f"mine-{i}" for i in range(5)]
    assert all(r["allocations"] for r in response.json()["results"])


def test_list_filters_and_search(api_client, member, team, cluster):
    for name, gpu_milli in (("alpha", 125), ("beta", 125), ("gamma", 1000)):
        submit_request(user=member, team=team, name=name, task_type="inference", gpu_milli=gpu_milli)
    client = api_client(member)

    assert [r["name"] for r in client.get(URL, {"search": "ph"}).json()["results"]] == ["alpha"]
    assert client.get(URL, {"state": "pending", "task_type": "inference"}).json()["count"] == 3
    assert client.get(URL, {"state": "running"}).json()["count"] == 0
    bad = client.get(URL, {"state": "sleeping"})
    assert bad.status_code == 400 and "state" in bad.json()["error"]["fields"]
    empty = client.get(URL, {"task_type": ""})
    assert empty.status_code == 400 and "task_type" in empty.json()["error"]["fields"]
    bad_size = client.get(URL, {"page_size": "null"})
    assert bad_size.status_code == 400 and "page_size" in bad_size.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"state": "sleeping"}, "state", "'sleeping' is not one of pending, scheduled, running, migrating,"),
        ({"state": ""}, "state", "'' is not one of pending,"),
        ({"task_type": "gaming"}, "task_type", "'gaming' is not one of training, inference."),
        ({"team": "language"}, "team", "'language' is none of your teams."),
    ],
)
def test_list_refuses_a_bad_filter_naming_the_parameter(api_client, member, theirs, query, field, message):
    response = api_client(member).get(URL, query)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error" and error["message"].startswith(f"{field}: {message}")
    assert list(error["fields"]) == [field] and error["fields"][field][0].startswith(message)


def test_list_filters_by_team_slug_and_operators_by_any_team(api_client, member, operator, team, theirs):
    submit_request(user=member, team=team, **GOOD)

    mine = api_client(member).get(URL, {"team": "vision"}).json()["results"]
    everyone = api_client(operator).get(URL, {"team": "language"}).json()["results"]

    assert [r["name"] for r in mine] == ["train"]
    assert [r["name"] for r in everyone] == ["secret-project"]


def test_schema_documents_the_list_filters(client, member):
    client.force_login(member)
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/requests/"]["get"]["parameters"]}

    assert {"search", "state", "team", "task_type", "page", "page_size"} <= set(parameters)
    assert "pending" in parameters["state"]["schema"]["enum"]
    assert parameters["task_type"]["schema"]["enum"] == ["inference", "training"]
    assert parameters["team"]["description"] == "Only this team's requests (slug)."


def test_detail_has_segments_and_event_timeline(api_client, member, team, cluster):
    request = submit_request(user=member, team=team, **GOOD)
    run_scheduling_pass()

    body = api_client(member).get(f"{URL}{request.pk}/").json()

    assert [e["to_state"] for e in body["events"]] == ["pending", "scheduled"]
    assert body["segments"][0]["node"] == "node-1"
    assert body["allocations"] == body["segments"]


@pytest.mark.parametrize(("method", "suffix"), [("get", ""), ("post", "cancel/"), ("post", "release/")])
def test_outsider_gets_404_for_another_teams_request(
    api_client, member, team, outsider, cluster, method, suffix
):
    request = submit_request(user=member, team=team, **GOOD)

    response = getattr(api_client(outsider), method)(f"{URL}{request.pk}/{suffix}")

    assert response.status_code == 404
    request.refresh_from_db()
    assert request.state == "pending"


def test_member_cancels_and_releases(api_client, member, team, cluster):
    from scheduler_app.services.transitions import transition_request

    client = api_client(member)
    pending = submit_request(user=member, team=team, **GOOD)
    running = submit_request(user=member, team=team, **(GOOD | {"name": "run"}))
    run_scheduling_pass()
    transition_request(running, "running")

    assert client.post(f"{URL}{pending.pk}/cancel/").json()["state"] == "cancelled"
    assert client.post(f"{URL}{running.pk}/release/").json()["state"] == "released"
    again = client.post(f"{URL}{running.pk}/release/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_ended"
    assert again.json()["error"]["message"] == f"Request {running.pk} is already released."
    ended = client.post(f"{URL}{pending.pk}/cancel/")
    assert (ended.status_code, ended.json()["error"]["code"]) == (409, "already_ended")


def test_cancelling_an_ended_request_again_says_it_is_already_cancelled_and_changes_nothing(
    api_client, member, team, cluster
):
    # given a request its member cancelled
    client = api_client(member)
    request = submit_request(user=member, team=team, **GOOD)
    client.post(f"{URL}{request.pk}/cancel/")
    events = Event.objects.count()

    # when it is cancelled again
    again = client.post(f"{URL}{request.pk}/cancel/")

    # then the answer says it has already ended, in its own words and code, and nothing is written
    assert again.status_code == 409
    assert again.json()["error"] == {
        "code": "already_ended",
        "message": f"Request {request.pk} is already cancelled.",
        "fields": {"state": [f"Request {request.pk} is already cancelled."]},
    }
    assert Event.objects.count() == events


def test_estimate_tells_where_and_writes_nothing(api_client, member, cluster):
    response = api_client(member).post(f"{URL}estimate/", GOOD, format="json")

    assert response.status_code == 200
    assert response.json()["starts_now"] is True
    assert response.json()["where"].startswith("node-1/gpu")
    assert not GpuRequest.objects.exists()


def test_estimate_needs_no_name_but_a_submit_does(api_client, member, cluster):
    client = api_client(member)
    nameless = {k: v for k, v in GOOD.items() if k != "name"}

    estimate = client.post(f"{URL}estimate/", nameless, format="json")
    blank = client.post(f"{URL}estimate/", nameless | {"name": ""}, format="json")
    submit = client.post(URL, nameless, format="json")

    assert (estimate.status_code, blank.status_code) == (200, 200)
    assert estimate.json()["summary"].startswith("Would start now on node-1/gpu")
    assert "as the next scheduling pass would place it, using the cluster as of" in estimate.json()["summary"]
    assert submit.status_code == 400 and "name" in submit.json()["error"]["fields"]
    assert not GpuRequest.objects.exists()


def test_cluster_shows_capacity_but_not_other_teams_work(
    api_client, member, team, theirs, outsider, other_team
):
    mine = submit_request(user=member, team=team, name="mine", task_type="training", gpu_milli=250)
    run_scheduling_pass()
    submit_request(
        user=outsider, team=other_team, name="secret-queue", task_type="training", gpu_milli=1000, num_gpus=4
    )

    response = api_client(member).get("/api/v1/cluster/")

    assert "secret-project" not in response.content.decode()
    (pool,) = response.json()["pools"]
    assert (pool["capacity_milli"], pool["allocated_milli"], pool["free_milli"]) == (2000, 750, 1250)
    slices = [s for n in response.json()["results"] for g in n["gpus"] for s in g["slices"]]
    assert sorted((s["label"], s["request_id"]) for s in slices) == [("mine", mine.pk), ("other team", None)]
    assert "secret-queue" not in response.content.decode()
    assert response.json()["queues"] == [{"team": "language", "pending": 1, "names": None}]


def test_session_login_works_for_the_browser(client, member, cluster):
    client.force_login(member)
    assert client.get(URL).status_code == 200


def test_allocations_tell_their_nodes_status_and_last_heartbeat(api_client, member, team, cluster):
    request = submit_request(user=member, team=team, **GOOD)
    run_scheduling_pass()
    Node.objects.update(status="suspect", last_heartbeat_at=dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC))

    (allocation,) = api_client(member).get(f"{URL}{request.pk}/").json()["allocations"]

    assert (allocation["node_status"], allocation["node_last_heartbeat_at"]) == (
        "suspect",
        "2026-05-01T12:00:00Z",
    )
