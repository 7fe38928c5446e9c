"""Retries against real failures: the live portal's throttle (429 + Retry-After) and a database error
(503 + Retry-After), a refused port, a server that hangs up after reading the request, and an answer
lost after the portal acted. Sleeps are recorded, never slept."""

import datetime as dt
import http.server
import socket
import threading

import pytest
import requests
from django.core.cache import cache
from gpu_portal_sdk import ConnectionFailedError, RateLimitedError
from gpu_portal_sdk.retry import RetryPolicy, parse_retry_after

from infra.api.throttling import PerUserRateThrottle
from scheduler_app.models import GpuRequest


@pytest.fixture
def two_per_minute(monkeypatch):
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"api": "2/min"})


def test_throttled_call_waits_as_retry_after_says_then_succeeds(
    connect, member, cluster, two_per_minute, fake_time
):
    portal = connect(member)
    portal.list(), portal.list()
    fake_time.on_sleep = cache.clear  # the minute passes: the token's budget is back

    assert portal.list() == []

    (waited,) = fake_time.slept
    assert 55 <= waited <= 60  # the portal's Retry-After, not the 0.5 s backoff


def test_throttling_that_persists_gives_up_after_max_retries(connect, member, two_per_minute, fake_time):
    portal = connect(member, max_retries=2)
    portal.list(), portal.list()

    with pytest.raises(RateLimitedError) as raised:
        portal.list()

    assert len(fake_time.slept) == 2
    assert all(55 <= s <= 60 for s in fake_time.slept)
    assert (raised.value.status, raised.value.code) == (429, "throttled")
    assert 55 <= raised.value.retry_after <= 60


def test_a_throttled_submit_is_retried_and_made_once(connect, member, cluster, two_per_minute, fake_time):
    portal = connect(member)
    portal.list(), portal.list()
    fake_time.on_sleep = cache.clear

    resource = portal.request_allocation(name="once", wait=False)

    assert len(fake_time.slept) == 1
    assert list(GpuRequest.objects.values_list("pk", flat=True)) == [resource.id]


@pytest.mark.parametrize("call", ["list", "request_allocation"])
def test_refused_connection_is_retried_with_exponential_backoff(
    connect, member, closed_port, fake_time, call
):
    portal = connect(member, url=f"http://127.0.0.1:{closed_port}", max_retries=3)

    with pytest.raises(ConnectionFailedError) as raised:
        getattr(portal, call)()

    assert fake_time.slept == [0.5, 1.0, 2.0]  # base 0.5 s doubling, jitter pinned at its top
    assert raised.value.status is None


@pytest.fixture
def hang_up_server():
    """Accepts a connection, reads the request, closes without answering; counts the requests."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    received = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                received.append(connection.recv(65536))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", received
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_a_read_is_retried_after_the_connection_drops(connect, member, hang_up_server, fake_time):
    url, received = hang_up_server

    with pytest.raises(ConnectionFailedError):
        connect(member, url=url, max_retries=2).list()

    assert len(received) == 3
    assert fake_time.slept == [0.5, 1.0]


def test_a_post_without_a_key_is_not_retried_once_it_may_have_been_received(
    connect, member, hang_up_server, fake_time
):
    url, received = hang_up_server

    with pytest.raises(ConnectionFailedError):
        connect(member, url=url, max_retries=2).recommend(command="python train.py")

    assert len(received) == 1  # the portal takes no key there: a second try would be a second call
    assert fake_time.slept == []


@pytest.mark.parametrize(
    "write",
    [
        lambda portal: portal.request_allocation(wait=False),
        lambda portal: portal.cancel(7),
        lambda portal: portal.release(7),
        lambda portal: portal.switch_billing(7, "on-demand"),
    ],
)
def test_a_write_is_retried_after_the_connection_drops_with_one_key_for_all_its_tries(
    connect, member, hang_up_server, fake_time, write
):
    url, received = hang_up_server

    with pytest.raises(ConnectionFailedError):
        write(connect(member, url=url, max_retries=2))

    keys = {_header(request, b"Idempotency-Key") for request in received}
    assert len(received) == 3 and len(keys) == 1 and None not in keys
    assert fake_time.slept == [0.5, 1.0]


def test_each_write_gets_a_key_of_its_own(connect, member, hang_up_server, fake_time):
    url, received = hang_up_server
    portal = connect(member, url=url, max_retries=0)

    for _ in range(2):
        with pytest.raises(ConnectionFailedError):
            portal.cancel(7)

    assert len({_header(request, b"Idempotency-Key") for request in received}) == 2


def _header(request: bytes, name: bytes) -> bytes | None:
    for line in request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


@pytest.fixture
def answer_lost_once(live_server):
    """A proxy in front of the live portal that passes the first request on and then hangs up instead
    of answering, as a connection lost after the portal acted does; later requests go through."""
    passed = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            answer = requests.post(live_server.url + self.path, data=body, headers=headers, timeout=30)
            passed.append(answer.status_code)
            if len(passed) == 1:
                self.close_connection = True
                return  # the portal acted; its answer never reaches the client
            self.send_response(answer.status_code)
            for name in ("Content-Type", "Idempotent-Replayed"):
                if name in answer.headers:
                    self.send_header(name, answer.headers[name])
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", passed
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_a_submit_whose_answer_was_lost_is_retried_with_its_key_and_made_once(
    connect, member, cluster, answer_lost_once, fake_time
):
    url, passed = answer_lost_once

    resource = connect(member, url=url).request_allocation(name="once", wait=False)

    assert passed == [201, 201]  # the second an answer the portal kept, not a second submit
    assert list(GpuRequest.objects.values_list("pk", flat=True)) == [resource.id]


def test_a_submit_the_database_failed_is_retried_after_retry_after(
    connect, member, cluster, fake_time, monkeypatch
):
    from django.db import OperationalError

    from scheduler_app.api import views

    real_submit = views.submit_request

    def fails_once(**fields):
        monkeypatch.setattr(views, "submit_request", real_submit)
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(views, "submit_request", fails_once)

    resource = connect(member).request_allocation(name="once", wait=False)

    assert fake_time.slept == [1.0]  # the 503's Retry-After
    assert list(GpuRequest.objects.values_list("pk", flat=True)) == [resource.id]


@pytest.mark.parametrize(
    ("method", "status", "retried"),
    [
        ("GET", 429, True),
        ("GET", 502, True),
        ("GET", 503, True),
        ("GET", 504, True),
        ("GET", 500, False),
        ("POST", 429, True),
        ("POST", 503, True),
        ("POST", 502, False),
        ("POST", 504, False),
        ("POST", 400, False),
    ],
)
def test_which_statuses_are_retried(method, status, retried):
    assert RetryPolicy().retries_status(method, status) is retried


@pytest.mark.parametrize(
    ("status", "retried"), [(429, True), (502, True), (503, True), (504, True), (500, False)]
)
def test_a_write_with_a_key_is_retried_as_a_read_is(status, retried):
    assert RetryPolicy().retries_status("POST", status, keyed=True) is retried


def test_retry_after_is_read_as_seconds_or_as_an_http_date():
    now = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)

    assert parse_retry_after("7", now) == 7
    assert parse_retry_after("Fri, 01 May 2026 12:00:30 GMT", now) == 30
    assert parse_retry_after("Fri, 01 May 2026 11:59:00 GMT", now) == 0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


def test_backoff_has_full_jitter_and_a_cap():
    policy = RetryPolicy(backoff_base_s=0.5, backoff_cap_s=4, random=lambda: 0.5)

    assert [policy.delay(n) for n in range(5)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert policy.delay(3, retry_after=12) == 12
