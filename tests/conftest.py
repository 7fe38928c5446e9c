"""Fixtures shared by the whole suite: three named users, a small cluster, public price files, and the
guard that makes the service-backed pass fail rather than skip."""

import asyncio
import concurrent.futures
import os

import pytest
from django.db import connection, connections
from django.db.backends.signals import connection_created

from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool, register_node
from teams.choices import Role
from teams.models import Membership, Team

pytest_plugins = ["tests.agent_fixtures"]

PRICE_FILE_HEADER = (
    "cloud,region,zone,instance_type,gpu_model,gpu_count,vcpus,memory_gib,"
    "ondemand_usd_per_hour,spot_usd_per_hour,ondemand_usd_per_gpu_hour,spot_usd_per_gpu_hour"
)

REQUIRE_SERVICES = os.environ.get("PORTAL_REQUIRE_SERVICES") == "1"


def pytest_sessionstart(session):
    if REQUIRE_SERVICES and not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.exit("PORTAL_REQUIRE_SERVICES=1 needs DATABASE_URL pointing at PostgreSQL.", returncode=2)


def pytest_sessionfinish(session, exitstatus):
    """In the service-backed pass a skipped test means a service was missing: fail the run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if REQUIRE_SERVICES and skipped:
        reporter.write_line(
            f"{len(skipped)} test(s) skipped in the service-backed pass: failing the run.", red=True
        )
        session.exitstatus = 1


DB_FIXTURES = ("db", "transactional_db", "_django_db_helper", "live_server")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After every test that used the database (and passed), DESIGN's capacity rules must still hold.

    A test that plants a violation on purpose says so with @pytest.mark.breaks_invariants.
    """
    result = yield
    if item.get_closest_marker("breaks_invariants") or not any(n in item.fixturenames for n in DB_FIXTURES):
        return result
    if connection.needs_rollback:  # the test ended on a refused write: its transaction holds nothing more
        return result
    from scheduler_app.rules.invariants import violations

    broken = _outside_any_event_loop(violations)
    assert not broken, "invariants broken after the test:\n" + "\n".join(broken)
    return result


def _outside_any_event_loop(check):
    """Browser tests drive Playwright's event loop in the test's thread, where Django refuses queries;
    they run on a live server whose data is committed, so another thread sees the same rows."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return check()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            return pool.submit(check).result()
        finally:
            pool.submit(connections.close_all).result()


@pytest.fixture(autouse=True, scope="session")
def _services_are_real(django_db_setup, django_db_blocker):
    if REQUIRE_SERVICES:
        with django_db_blocker.unblock():
            assert connection.vendor == "postgresql", "the service-backed pass must run on PostgreSQL"


@pytest.fixture
def team(db):
    return Team.objects.create(name="Vision", slug="vision")


@pytest.fixture
def other_team(db):
    return Team.objects.create(name="Language", slug="language")


@pytest.fixture
def team_admin(team, django_user_model):
    user = django_user_model.objects.create_user("alice", password="pw-alice-123")
    Membership.objects.create(team=team, user=user, role=Role.TEAM_ADMIN)
    return user


@pytest.fixture
def member(team, django_user_model):
    user = django_user_model.objects.create_user("bob", password="pw-bob-123")
    Membership.objects.create(team=team, user=user, role=Role.MEMBER)
    return user


@pytest.fixture
def outsider(other_team, django_user_model):
    user = django_user_model.objects.create_user("mallory", password="pw-mallory-123")
    Membership.objects.create(team=other_team, user=user, role=Role.MEMBER)
    return user


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user(
        "ops", password="pw-ops-123", is_staff=True, is_superuser=True
    )


@pytest.fixture
def pool(db):
    return create_pool(name="a100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)


@pytest.fixture
def make_node(pool):
    """make_node(name, gpus=4, memory_mib=81920, pool=...) -> Node with its cards."""

    def make(name="node-1", gpus=4, memory_mib=81920, pool=pool, model=None):
        node, _ = register_node(
            pool=pool,
            name=name,
            cpu_milli=64_000,
            memory_mib=512 * 1024,
            gpus=[
                {"uuid": f"GPU-{name}-{i}", "model": model or pool.gpu_model, "memory_mib": memory_mib}
                for i in range(gpus)
            ],
        )
        return node

    return make


@pytest.fixture
def sqlite_readers_take_no_table_locks(transactional_db):
    """For tests where threads of this process read while another writes. The SQLite test database is
    in memory with a shared cache, where a table one connection is writing cannot be read by another:
    the read fails at once ("database table is locked"; a file database, as the embedded default
    uses, waits instead). Readers that take no table locks, this test's and every later one's, leave
    writers alone and are never refused."""
    _read_uncommitted(connection, on=True)
    connection_created.connect(_new_connections_read_uncommitted)
    yield
    connection_created.disconnect(_new_connections_read_uncommitted)
    _read_uncommitted(connection, on=False)


def _new_connections_read_uncommitted(sender, connection, **kwargs):
    _read_uncommitted(connection, on=True)


def _read_uncommitted(connection, *, on):
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA read_uncommitted = {int(on)}")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def api_client():
    """api_client(user) -> a DRF client authenticated with a fresh personal API token of that user."""
    import datetime as dt

    from django.utils import timezone
    from rest_framework.test import APIClient

    from teams.services import create_api_token

    def make(user=None):
        client = APIClient()
        if user is not None:
            _, secret = create_api_token(user, name="tests", expires_at=timezone.now() + dt.timedelta(days=1))
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture
def price_file(tmp_path):
    """price_file(rows) -> path of a public price file in tmp_path, in the real file's format; each row is
    (gpu_model, on-demand per GPU-h, spot per GPU-h), "" for a price the cloud does not publish."""

    def write(rows, name="prices.csv", header=PRICE_FILE_HEADER):
        lines = [header]
        for index, (model, on_demand, spot) in enumerate(rows):
            lines.append(
                f'aws,"Region {index}, US",z{index},p4de.24xlarge,{model},1,96,1152,,,{on_demand},{spot}'
            )
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def fresh_channel_layer():
    """A channel layer of the test's own: channels_redis's layer keeps receive state (a lock, the
    event loop it was made on) that a consumer left waiting in an earlier test's event loop would
    hold for this one."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
