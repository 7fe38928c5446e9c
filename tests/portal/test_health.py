"""Probes: liveness only says the process answers; readiness checks the database and Redis apart."""

import asyncio
import json
import socket
import threading

import pytest
from django.db import OperationalError


def closed_port_url() -> str:
    """A Redis URL on a loopback port nothing listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.mark.django_db
def test_ready_checks_the_database_and_redis_when_it_is_used(client, settings):
    answer = client.get("/healthz/ready")

    assert answer.status_code == 200
    assert answer.json() == {
        "status": "ok",
        "database": "ok",
        "redis": "ok" if settings.REDIS_URL else "not used",
    }


@pytest.mark.django_db
def test_ready_is_503_naming_redis_when_redis_is_unreachable(client, settings, caplog):
    settings.REDIS_URL = closed_port_url()

    answer = client.get("/healthz/ready")

    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "unavailable"
    assert body["database"] == "ok"
    assert body["redis"] == "error"  # the probe is public: the details go to the log only
    assert "Redis cannot be reached" in caplog.text and "127.0.0.1" in caplog.text


@pytest.mark.django_db
def test_ready_is_503_naming_the_database_when_it_is_unreachable(client, monkeypatch, caplog):
    def refuse():
        raise OperationalError("connection refused")

    monkeypatch.setattr("portal.health.connection.cursor", refuse)

    answer = client.get("/healthz/ready")

    assert answer.status_code == 503
    assert answer.json()["status"] == "unavailable"
    assert answer.json()["database"] == "error"
    assert "the database cannot be reached: connection refused" in caplog.text


def test_live_answers_while_services_are_away(client, settings):
    settings.REDIS_URL = closed_port_url()

    answer = client.get("/healthz/live")

    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


@pytest.mark.django_db
def test_probes_are_not_redirected_to_https(client, settings):
    settings.SECURE_SSL_REDIRECT = True

    assert client.get("/healthz/live").status_code == 200
    assert client.get("/healthz/ready").status_code == 200
    assert client.get("/accounts/login/").status_code == 301


def test_live_is_answered_while_every_http_thread_is_busy(settings):
    from portal.asgi import application

    served = application.application_mapping["http"]
    while not hasattr(served, "executor"):  # the thread pool under its wrappers
        served = served.app
    release = threading.Event()
    for _ in range(settings.HTTP_THREADS):
        served.executor.submit(release.wait)
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def probe():
        await asyncio.wait_for(application(live_scope(), receive, send), timeout=1)

    try:
        asyncio.run(probe())
    finally:
        release.set()

    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"]) == {"status": "ok"}


def live_scope() -> dict:
    return {
        "type": "http",
        "method": "GET",
        "path": "/healthz/live",
        "raw_path": b"/healthz/live",
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "server": ("10.0.0.7", 8000),  # a pod address, as a probe calls it: not an allowed host
        "client": ("10.0.0.1", 5555),
        "headers": [(b"host", b"10.0.0.7:8000")],
    }
