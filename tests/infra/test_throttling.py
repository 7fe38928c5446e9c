"""API budgets: counted atomically (real threads against the live server and Redis), per user across
all its tokens and its session, per node credential; 429 with Retry-After to the end of the window."""

import datetime as dt
import threading
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from infra import rate_limits
from infra.api.throttling import PerNodeRateThrottle, PerUserRateThrottle
from scheduler_app.services.inventory import issue_agent_credential
from teams.services import create_api_token
from tests.portal.test_health import closed_port_url

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def rate(monkeypatch, value: str) -> None:
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"api": value})
    monkeypatch.setattr(PerNodeRateThrottle, "THROTTLE_RATES", {"api": value})


def secret(user) -> str:
    return create_api_token(user, name="load", expires_at=timezone.now() + dt.timedelta(days=1))[1]


@pytest.mark.postgres
def test_sixteen_threads_get_exactly_the_rate_and_no_more(live_server, transactional_db, member, monkeypatch):
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache"), "counters must be in Redis here"
    rate(monkeypatch, "600/min")
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/teams/", headers={"Authorization": f"Bearer {secret(member)}"}
    )
    start = threading.Barrier(16)

    def send(count: int) -> list[tuple[int, str | None]]:
        start.wait()
        answers = []
        for _ in range(count):
            try:
                with urllib.request.urlopen(request) as response:
                    answers.append((response.status, None))
            except urllib.error.HTTPError as refused:
                answers.append((refused.code, refused.headers["Retry-After"]))
        return answers

    with ThreadPoolExecutor(16) as pool:
        shares = [900 // 16 + (1 if i < 900 % 16 else 0) for i in range(16)]
        answers = [answer for part in pool.map(send, shares) for answer in part]

    assert Counter(status for status, _ in answers) == {200: 600, 429: 300}
    assert all(0 < int(wait) <= 60 for status, wait in answers if status == 429)


def test_two_tokens_and_the_session_of_one_user_share_its_budget(client, member, outsider, monkeypatch):
    rate(monkeypatch, "3/min")
    first, second = APIClient(), APIClient()
    first.credentials(HTTP_AUTHORIZATION=f"Bearer {secret(member)}")
    second.credentials(HTTP_AUTHORIZATION=f"Bearer {secret(member)}")
    client.force_login(member)

    codes = [c.get("/api/v1/teams/").status_code for c in (first, second, first, second, client)]

    assert codes == [200, 200, 200, 429, 429]
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {secret(outsider)}")
    assert other.get("/api/v1/teams/").status_code == 200


def test_retry_after_counts_to_the_end_of_the_window_then_the_budget_is_back(api_client, member, monkeypatch):
    rate(monkeypatch, "2/min")
    client = api_client(member)
    with time_machine.travel(T0, tick=False) as clock:
        assert client.get("/api/v1/teams/").status_code == 200
        clock.shift(20)
        assert client.get("/api/v1/teams/").status_code == 200

        refused = client.get("/api/v1/teams/")

        assert refused.status_code == 429
        assert refused["Retry-After"] == "40"
        assert refused.json()["error"] == {
            "code": "throttled",
            "message": refused.json()["error"]["message"],
            "fields": {},
        }
        clock.shift(40)
        assert client.get("/api/v1/teams/").status_code == 200


def test_each_node_credential_has_its_own_budget(make_node, monkeypatch):
    rate(monkeypatch, "1/min")
    agents = []
    for name in ("node-1", "node-2"):
        agent = APIClient()
        agent.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(make_node(name, gpus=1))}")
        agents.append(agent)
    url = "/api/v1/agent/samples/"

    first, again, other = (agent.post(url, {}, format="json") for agent in (agents[0], *agents))

    assert (first.status_code, again.status_code, other.status_code) == (400, 429, 400)
    assert 0 < int(again["Retry-After"]) <= 60


def test_while_redis_is_away_each_process_still_holds_a_user_to_the_rate(
    api_client, member, settings, monkeypatch
):
    settings.CACHES = {"default": {"BACKEND": "infra.redis_cache.RedisCache", "LOCATION": closed_port_url()}}
    monkeypatch.setattr(rate_limits, "local_counters", rate_limits.LocalCounters())
    rate(monkeypatch, "3/min")
    client = api_client(member)

    with time_machine.travel(T0, tick=False) as clock:
        codes = [client.get("/api/v1/teams/").status_code for _ in range(5)]
        refused = client.get("/api/v1/teams/")
        clock.shift(60)
        again = client.get("/api/v1/teams/")

    assert codes == [200, 200, 200, 429, 429]
    assert refused["Retry-After"] == "60"
    assert again.status_code == 200
