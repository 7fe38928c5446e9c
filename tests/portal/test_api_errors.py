"""Every error under /api/v1/ answers in the one envelope {"error": {"code", "message", "fields"}},
and bad input that would have been a 500 (NUL characters, JSON nested too deep, a body too big)
is refused before it reaches the database. The NUL cases matter on PostgreSQL, which cannot store NUL
in text: they run there in the service-backed pass."""

import json

import pytest
from django.db import InterfaceError, OperationalError
from django.test import override_settings

from audit.models import Event
from scheduler_app.models import GpuRequest

URL = "/api/v1/requests/"
GOOD = {"name": "train", "task_type": "training", "gpu_milli": 250}


@pytest.fixture
def cluster(make_node):
    return make_node(gpus=2)


@pytest.fixture
def nothing_written(db):
    """Asserts, after the test, that no request and no event was written."""
    events = Event.objects.count()
    yield
    assert not GpuRequest.objects.exists()
    assert Event.objects.count() == events


def envelope(response, status: int, code: str) -> dict:
    """The response's error after checking its status, JSON content type and envelope shape."""
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "fields"}
    assert error["code"] == code
    assert isinstance(error["fields"], dict)
    return error


@pytest.mark.parametrize("parameter", ["search", "team", "state"])
def test_a_nul_in_a_query_parameter_is_a_400_naming_it(api_client, member, cluster, parameter):
    response = api_client(member).get(URL, {parameter: "a\x00b"})

    error = envelope(response, 400, "validation_error")
    assert error["message"] == f"{parameter}: NUL characters are not allowed."
    assert error["fields"] == {parameter: ["NUL characters are not allowed."]}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "train\x00"}, "name"),
        ({"team": "vision\x00"}, "team"),
        ({"na\x00me": "train"}, "na\x00me"),
    ],
)
def test_a_nul_in_a_json_string_is_a_400_naming_the_field_and_writes_nothing(
    api_client, member, cluster, nothing_written, payload, field
):
    response = api_client(member).post(URL, GOOD | payload, format="json")

    error = envelope(response, 400, "validation_error")
    assert error["fields"] == {field: ["NUL characters are not allowed."]}
    assert error["message"] == f"{field}: NUL characters are not allowed."


def test_a_nul_deep_in_a_json_body_names_its_place(api_client, member, cluster, nothing_written):
    response = api_client(member).post(URL, GOOD | {"name": ["ok", {"x": "\x00"}]}, format="json")

    error = envelope(response, 400, "validation_error")
    assert error["fields"] == {"name.1.x": ["NUL characters are not allowed."]}


def test_a_page_refuses_a_nul_in_a_query_parameter_with_a_plain_400(client, member):
    client.force_login(member)

    response = client.get("/requests/", {"state": "\x00"})

    assert response.status_code == 400
    assert "state: NUL characters are not allowed." in response.text


def test_a_page_refuses_a_nul_in_a_form_field_and_writes_nothing(client, member, cluster, nothing_written):
    client.force_login(member)

    response = client.post("/requests/new/", {"team": "1", "name": "x\x00", "share": "250"})

    assert response.status_code == 400
    assert "name: NUL characters are not allowed." in response.text


@pytest.mark.parametrize("depth", [40, 1000, 100_000])
def test_json_nested_too_deep_is_a_400_and_writes_nothing(
    api_client, member, cluster, nothing_written, depth
):
    body = '{"name": ' + "[" * depth + "]" * depth + ', "task_type": "training", "gpu_milli": 250}'

    response = api_client(member).post(URL, body, content_type="application/json")

    error = envelope(response, 400, "parse_error")
    assert "nested" in error["message"]
    assert error["fields"] == {}


def test_malformed_json_is_a_400_parse_error(api_client, member, cluster, nothing_written):
    response = api_client(member).post(URL, '{"name": ', content_type="application/json")

    error = envelope(response, 400, "parse_error")
    assert error["fields"] == {}


def test_a_body_over_the_upload_limit_is_a_413_in_the_envelope(api_client, member, cluster, nothing_written):
    body = json.dumps(GOOD | {"name": "x" * (5 * 1024 * 1024)})

    response = api_client(member).post(URL, body, content_type="application/json")

    error = envelope(response, 413, "too_large")
    assert error["fields"] == {}


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_the_413_follows_the_upload_limit_setting(api_client, member, cluster, nothing_written):
    response = api_client(member).post(URL, GOOD | {"name": "x" * 1000}, format="json")

    envelope(response, 413, "too_large")


def test_a_401_carries_empty_fields(db, api_client):
    error = envelope(api_client().get(URL), 401, "not_authenticated")
    assert error["fields"] == {}


@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_an_unknown_url_under_the_api_is_a_404_in_the_envelope(api_client, member, method):
    response = getattr(api_client(member), method)("/api/v1/no-such-thing/")

    error = envelope(response, 404, "not_found")
    assert error["fields"] == {}


def test_a_method_not_allowed_is_a_405_in_the_envelope(api_client, member):
    error = envelope(api_client(member).delete(URL), 405, "method_not_allowed")
    assert error["fields"] == {}


def test_the_schema_says_fields_is_always_there(client, member):
    client.force_login(member)

    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    error = schema["components"]["schemas"]["Error"]["properties"]["error"]
    assert error["required"] == ["code", "message", "fields"]


def test_an_unexpected_failure_under_the_api_answers_in_the_envelope(api_client, member, monkeypatch):
    from scheduler_app.api import views

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(views, "cluster_picture", broken)
    client = api_client(member)
    client.raise_request_exception = False

    answer = client.get("/api/v1/cluster/")

    assert answer.status_code == 500
    assert answer["Content-Type"] == "application/json"
    assert answer.json() == {
        "error": {
            "code": "server_error",
            "message": "The portal failed to answer; the error is logged.",
            "fields": {},
        }
    }


@pytest.mark.parametrize("failure", [OperationalError, InterfaceError])
def test_a_database_failure_mid_read_answers_503_with_retry_after(api_client, member, monkeypatch, failure):
    from scheduler_app.api import views

    def connection_lost(*args, **kwargs):
        raise failure("server closed the connection unexpectedly")

    monkeypatch.setattr(views, "cluster_picture", connection_lost)

    answer = api_client(member).get("/api/v1/cluster/")

    envelope(answer, 503, "database_unavailable")
    assert answer["Retry-After"] == "1"


def test_a_database_failure_mid_write_answers_503_and_the_retry_with_its_key_writes_once(
    api_client, member, cluster, monkeypatch
):
    from scheduler_app.api import views

    real_submit = views.submit_request

    def submit_then_lose_the_connection(**fields):
        real_submit(**fields)  # written, then the connection is lost before the commit
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(views, "submit_request", submit_then_lose_the_connection)
    client = api_client(member)
    failed = client.post(URL, GOOD, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    monkeypatch.setattr(views, "submit_request", real_submit)

    retried = client.post(URL, GOOD, format="json", HTTP_IDEMPOTENCY_KEY="k1")

    envelope(failed, 503, "database_unavailable")
    assert failed["Retry-After"] == "1"
    assert retried.status_code == 201 and not retried.has_header("Idempotent-Replayed")
    assert list(GpuRequest.objects.values_list("pk", flat=True)) == [retried.json()["id"]]


def test_too_many_query_parameters_answer_in_the_envelope(api_client, member, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    client = api_client(member)
    client.raise_request_exception = False

    answer = client.get("/api/v1/requests/?" + "&".join(f"p{i}=1" for i in range(20)))

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "bad_request"
    assert answer.json()["error"]["fields"] == {}
