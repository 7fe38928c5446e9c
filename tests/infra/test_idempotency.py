"""Idempotency-Key on the API's writes: a repeat gets the first answer and writes nothing, the same key
with another request is refused, a refused or failed write keeps no key. The concurrent double POST
runs on PostgreSQL with real threads (in the service-backed pass)."""

import datetime as dt
import threading
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections
from django.utils import timezone

from infra.models import IdempotencyKey
from infra.tasks import forget_idempotency_keys
from scheduler_app.api import views
from scheduler_app.models import GpuRequest

URL = "/api/v1/requests/"
BODY = {"name": "once", "gpu_milli": 125}


@pytest.fixture
def cluster(make_node):
    return make_node(gpus=2)


def post(client, path, body, key):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_replay_after_the_first_committed_returns_the_same_answer_and_submits_nothing(
    api_client, member, cluster
):
    client = api_client(member)
    first = post(client, URL, BODY, "submit-1")

    again = post(client, URL, BODY, "submit-1")

    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert list(GpuRequest.objects.values_list("pk", flat=True)) == [first.json()["id"]]


def test_the_same_json_with_other_spacing_and_key_order_is_the_same_request(api_client, member, cluster):
    client = api_client(member)
    first = post(client, URL, BODY, "submit-1")

    again = client.post(
        URL,
        '{ "gpu_milli" : 125,  "name": "once" }',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="submit-1",
    )

    assert again.status_code == 201 and again.content == first.content
    assert GpuRequest.objects.count() == 1


def test_the_same_key_with_another_body_is_refused_with_422_and_changes_nothing(api_client, member, cluster):
    client = api_client(member)
    post(client, URL, BODY, "submit-1")

    other = post(client, URL, {"name": "another", "gpu_milli": 125}, "submit-1")

    assert other.status_code == 422, other.content
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert list(GpuRequest.objects.values_list("name", flat=True)) == ["once"]


def test_the_same_key_on_another_write_is_refused_with_422_and_changes_nothing(api_client, member, cluster):
    client = api_client(member)
    submitted = post(client, URL, BODY, "submit-1").json()

    other = post(client, f"{URL}{submitted['id']}/cancel/", None, "submit-1")

    assert other.status_code == 422, other.content
    assert GpuRequest.objects.get().state == "pending"


def test_keys_are_each_users_own(api_client, member, team_admin, cluster):
    mine = post(api_client(member), URL, BODY, "same-key")

    theirs = post(api_client(team_admin), URL, BODY, "same-key")

    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]


def test_a_repeated_cancel_with_its_key_answers_as_the_first_did(api_client, member, cluster):
    client = api_client(member)
    submitted = post(client, URL, BODY, "submit-1").json()
    cancel = f"{URL}{submitted['id']}/cancel/"
    first = post(client, cancel, None, "cancel-1")

    again = post(client, cancel, None, "cancel-1")
    unkeyed = client.post(cancel)

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and first.json()["state"] == "cancelled"
    assert unkeyed.status_code == 409  # without its key, a repeat is a new cancel of an ended request


def test_a_refused_write_keeps_no_key(api_client, member, cluster):
    client = api_client(member)
    refused = post(client, URL, {"name": "too-big", "gpu_milli": 1001}, "submit-1")

    accepted = post(client, URL, BODY, "submit-1")

    assert refused.status_code == 400
    assert accepted.status_code == 201 and not accepted.has_header("Idempotent-Replayed")
    assert GpuRequest.objects.count() == IdempotencyKey.objects.count() == 1


@pytest.mark.parametrize("key", ["", "k" * 256, "clé"])
def test_a_malformed_key_is_refused_with_400(api_client, member, cluster, key):
    response = post(api_client(member), URL, BODY, key)

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["Idempotency-Key"]
    assert not GpuRequest.objects.exists()


def test_keys_older_than_their_time_to_live_are_forgotten(api_client, member, cluster, settings):
    client = api_client(member)
    post(client, URL, BODY, "old")
    post(client, URL, {"name": "new", "gpu_milli": 125}, "new")
    IdempotencyKey.objects.filter(key="old").update(
        created_at=timezone.now() - dt.timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_S + 1)
    )

    assert forget_idempotency_keys() == 1  # the task beat runs, called as a plain function

    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]
    assert post(client, URL, BODY, "old").status_code == 201  # a new write now
    assert GpuRequest.objects.filter(name="once").count() == 2


def test_beat_forgets_expired_keys_with_the_upkeep():
    entry = django_settings.CELERY_BEAT_SCHEDULE["idempotency-keys"]

    assert entry == {
        "task": forget_idempotency_keys.name,
        "schedule": float(django_settings.TELEMETRY_INTERVAL_S),
    }


def test_the_schema_names_the_header_on_exactly_the_writes_that_take_it(client, member):
    client.force_login(member)

    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    keyed = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", ()))
    }
    assert keyed == {
        ("POST", "/api/v1/requests/"),
        ("POST", "/api/v1/requests/{id}/cancel/"),
        ("POST", "/api/v1/requests/{id}/release/"),
        ("POST", "/api/v1/requests/{id}/billing-mode/"),
        ("POST", "/api/v1/resize-offers/{id}/accept/"),
        ("POST", "/api/v1/teams/{slug}/members/"),
        ("POST", "/api/v1/nodes/{id}/reclaim/"),
        ("POST", "/api/v1/what-if/"),
        ("POST", "/api/v1/prices/premiums/"),
    }
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert ("422" in operation["responses"]) is ((method.upper(), path) in keyed)
            assert "503" in operation["responses"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_concurrent_double_post_with_one_key_creates_one_request(api_client, member, cluster, monkeypatch):
    # The first submit is held inside its transaction until the second has arrived and is waiting.
    real_submit = views.submit_request
    inside, go = threading.Event(), threading.Event()

    def held_submit(**fields):
        if not inside.is_set():
            inside.set()
            assert go.wait(30)
        return real_submit(**fields)

    monkeypatch.setattr(views, "submit_request", held_submit)
    clients = [api_client(member), api_client(member)]
    answers = [None, None]

    def send(i):
        try:
            answers[i] = post(clients[i], URL, BODY, "double")
        finally:
            connections.close_all()

    first = threading.Thread(target=send, args=(0,))
    second = threading.Thread(target=send, args=(1,))
    first.start()
    assert inside.wait(30)
    second.start()
    deadline = time.monotonic() + 10
    while second.is_alive() and not _a_session_waits_for_a_lock() and time.monotonic() < deadline:
        time.sleep(0.01)  # polling: the second is waiting once PostgreSQL says so
    go.set()
    first.join(30)
    second.join(30)

    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].content == answers[1].content
    assert answers[1]["Idempotent-Replayed"] == "true"
    assert GpuRequest.objects.count() == 1


def _a_session_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0
