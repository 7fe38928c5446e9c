"""Sign-in throttling on /accounts/login/ and /admin/login/: per account and per client address, no
password checked while locked (so even the right one is refused), lifted when the window ends."""

import datetime as dt

import pytest
import time_machine

from infra import rate_limits
from tests.portal.test_health import closed_port_url

LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]
T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
ACCOUNT_LOCKED = "Too many failed sign-ins for this account; try again in 15 minutes."
ADDRESS_LOCKED = "Too many failed sign-ins from your address; try again in 15 minutes."


def sign_in(client, page, username, password, address="10.0.0.1"):
    """POST the login form; the response, and whether the session is now signed in."""
    response = client.post(page, {"username": username, "password": password}, REMOTE_ADDR=address)
    return response, "_auth_user_id" in client.session


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_ten_failures_lock_the_account_even_against_the_right_password(client, operator, page):
    with time_machine.travel(T0, tick=False):
        for _ in range(10):
            assert sign_in(client, page, "ops", "wrong")[1] is False

        response, signed_in = sign_in(client, page, "ops", "pw-ops-123")

    assert signed_in is False
    assert ACCOUNT_LOCKED in response.text
    operator.refresh_from_db()
    assert operator.last_login is None


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_the_account_lock_holds_from_any_address_and_spares_other_accounts(client, operator, page):
    operator.__class__.objects.create_user("ops2", password="pw-ops2-123", is_staff=True)
    for i in range(10):
        sign_in(client, page, "ops", "wrong", address=f"10.0.0.{i}")

    assert ACCOUNT_LOCKED in sign_in(client, page, "OPS", "pw-ops-123", address="10.9.9.9")[0].text
    assert sign_in(client, page, "ops2", "pw-ops2-123", address="10.0.0.1")[1] is True


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_failures_from_one_address_lock_it_for_every_account(client, operator, settings, page):
    settings.LOGIN_FAILURES_PER_ADDRESS = 5
    with time_machine.travel(T0, tick=False):
        for i in range(5):
            sign_in(client, page, f"nobody-{i}", "wrong")

        response, signed_in = sign_in(client, page, "ops", "pw-ops-123")
        elsewhere = sign_in(client, page, "ops", "pw-ops-123", address="10.0.0.2")[1]

    assert signed_in is False
    assert ADDRESS_LOCKED in response.text
    assert elsewhere is True


def test_a_success_does_not_reset_the_addresss_failures(client, operator, member, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 3
    page = "/accounts/login/"
    sign_in(client, page, "nobody-1", "wrong")
    sign_in(client, page, "nobody-2", "wrong")
    assert sign_in(client, page, "bob", "pw-bob-123")[1] is True
    client.logout()
    sign_in(client, page, "nobody-3", "wrong")

    response, signed_in = sign_in(client, page, "ops", "pw-ops-123")

    assert signed_in is False
    assert ADDRESS_LOCKED in response.text


def test_successes_are_not_failures(client, member):
    for _ in range(12):
        assert sign_in(client, "/accounts/login/", "bob", "pw-bob-123")[1] is True
        client.logout()


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_the_lock_lifts_when_its_window_ends(client, operator, page):
    with time_machine.travel(T0, tick=False) as clock:
        for _ in range(10):
            sign_in(client, page, "ops", "wrong")
        clock.shift(14 * 60 + 1)
        response = sign_in(client, page, "ops", "pw-ops-123")[0]
        assert "try again in 1 minute." in response.text

        clock.shift(59)

        assert sign_in(client, page, "ops", "pw-ops-123")[1] is True


@pytest.fixture
def redis_away(settings, monkeypatch):
    """The shared counters' Redis refuses connections; this test's process counts on its own."""
    settings.CACHES = {"default": {"BACKEND": "infra.redis_cache.RedisCache", "LOCATION": closed_port_url()}}
    monkeypatch.setattr(rate_limits, "local_counters", rate_limits.LocalCounters())


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_sign_in_still_works_while_redis_is_away(client, operator, page, redis_away, caplog):
    response, signed_in = sign_in(client, page, "ops", "pw-ops-123")

    assert signed_in is True, response.text
    assert "cannot reach Redis for the rate counters; counting in this process only" in caplog.text


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_while_redis_is_away_the_process_still_locks_an_account_after_its_failures(
    client, operator, page, redis_away
):
    with time_machine.travel(T0, tick=False) as clock:
        for _ in range(30):
            sign_in(client, page, "ops", "wrong")

        response, signed_in = sign_in(client, page, "ops", "pw-ops-123")

        assert signed_in is False
        assert ACCOUNT_LOCKED in response.text
        clock.shift(15 * 60)
        assert sign_in(client, page, "ops", "pw-ops-123")[1] is True


def test_while_redis_is_away_a_success_is_still_no_failure(client, member, redis_away):
    for _ in range(12):
        assert sign_in(client, "/accounts/login/", "bob", "pw-bob-123")[1] is True
        client.logout()
