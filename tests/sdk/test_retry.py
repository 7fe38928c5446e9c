"""Retries against real failures: the live portal's throttle (429 + Retry-After), a refused port,
and a server that hangs up after reading the request. Sleeps are recorded, never slept."""

import datetime as dt
import socket
import threading

import pytest
from django.core.cache import cache
from gpu_portal_sdk import ConnectionFailedError, RateLimitedError
from gpu_portal_sdk.retry import RetryPolicy, parse_retry_after

from portal.api.throttling import PerUserRateThrottle
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


def test_a_post_is_not_retried_once_it_may_have_been_received(connect, member, hang_up_server, fake_time):
    url, received = hang_up_server

    with pytest.raises(ConnectionFailedError):
        connect(member, url=url, max_retries=2).request_allocation()

    assert len(received) == 1  # a second try could submit twice
    assert fake_time.slept == []


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
