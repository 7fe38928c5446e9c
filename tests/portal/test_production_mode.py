"""Production mode for real: the README's production commands, on PostgreSQL and Redis.

Each test starts the processes exactly as the README's production table writes them (only the port
is a free one), with DEBUG=0. SECURE_SSL_REDIRECT=0 because the test talks plain HTTP on loopback,
where production has a TLS proxy in front. Every process is started in its own process group and
killed with it whatever happens, and the scratch database is dropped at the end.
"""

import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import dj_database_url
import psycopg
import pytest
from django.conf import settings

from bench.production import command, free_port

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 60

SEED = """
import datetime as dt
from django.contrib.auth import get_user_model
from django.utils import timezone
from teams.choices import Role
from teams.models import Membership, Team
from teams.services import create_api_token
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool, register_node
user = get_user_model().objects.create_user("prod-check")
team = Team.objects.create(name="Production check", slug="production-check")
Membership.objects.create(team=team, user=user, role=Role.TEAM_ADMIN)
pool = create_pool(name="a100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
gpus = [{"uuid": "GPU-prod-0", "model": "A100-80GB", "memory_mib": 81920}]
register_node(pool=pool, name="node-1", cpu_milli=64000, memory_mib=524288, gpus=gpus)
_, secret = create_api_token(user, name="production check", expires_at=timezone.now() + dt.timedelta(hours=1))
print(secret)
"""


@dataclass
class Site:
    env: dict[str, str]
    database: str
    admin_dsn: str
    token: str


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A migrated scratch database (named after DATABASE_URL's plus a suffix) with a user, team, pool,
    node and API token; the environment the production processes get."""
    url = dj_database_url.parse(os.environ["DATABASE_URL"])
    database = f"{url['NAME']}_production_mode"
    admin_dsn = psycopg.conninfo.make_conninfo(
        host=url["HOST"],
        port=url["PORT"] or 5432,
        user=url["USER"],
        password=url["PASSWORD"],
        dbname="postgres",
    )
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{database}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_"))}
    env |= {
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),  # the processes run in a scratch dir (beat writes its schedule there)
        "DATABASE_URL": urllib.parse.urlsplit(os.environ["DATABASE_URL"])
        ._replace(path=f"/{database}")
        .geturl(),
        "REDIS_URL": settings.REDIS_URL,
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "SCHEDULER_INTERVAL_S": "3600",  # so only the pass a submit asks for can schedule in time
    }
    manage = ["python", str(ROOT / "manage.py")]
    try:
        subprocess.run([*manage, "migrate", "--noinput", "-v0"], env=env, check=True, timeout=300)
        seeded = subprocess.run(
            [*manage, "shell", "-c", SEED], env=env, check=True, timeout=120, capture_output=True, text=True
        )
        yield Site(
            env=env, database=database, admin_dsn=admin_dsn, token=seeded.stdout.strip().splitlines()[-1]
        )
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@contextmanager
def processes(argvs: dict[str, list[str]], env: dict[str, str], workdir: Path):
    """Start each argv in its own process group; on the way out kill every group that is left."""
    started: dict[str, subprocess.Popen] = {}
    try:
        for name, argv in argvs.items():
            log = (workdir / f"{name}.log").open("w")
            started[name] = subprocess.Popen(
                argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        yield started
    finally:
        for proc in started.values():
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop(started: dict[str, subprocess.Popen]) -> dict[str, int | None]:
    """SIGTERM to every process, then each one's exit status (None: still running after the timeout)."""
    for proc in started.values():
        proc.send_signal(signal.SIGTERM)
    codes = {}
    for name, proc in started.items():
        try:
            codes[name] = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            codes[name] = None
    return codes


def logs(workdir: Path) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(workdir.glob("*.log")))


def call(base: str, path: str, token: str = "", body: dict | None = None) -> tuple[int, dict]:
    """(status, JSON body) of one request; HTTP errors are answers too."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}{path}", data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            return error.code, json.loads(text)
        except ValueError:  # a server error page
            return error.code, {"text": text[:500]}


def wait_for(base: str, path: str, workdir: Path, deadline_s: float = 120) -> tuple[int, dict]:
    """The first answer of `path` once the server accepts connections."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            return call(base, path)
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{path} never answered\n{logs(workdir)}")


def test_production_commands_schedule_a_submit_and_stop_cleanly(site, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argvs = {
        "asgi": command("ASGI server", port),
        "worker": command("Celery worker", port),
        "beat": command("Celery beat", port),
    }
    assert argvs["asgi"][0] == "uvicorn"

    with processes(argvs, site.env, tmp_path) as started:
        ready = wait_for(base, "/healthz/ready", tmp_path)
        assert ready == (200, {"status": "ok", "database": "ok", "redis": "ok"}), logs(tmp_path)

        status, submitted = call(
            base, "/api/v1/requests/", site.token, {"name": "production-check", "gpu_milli": 250}
        )
        assert status == 201, submitted

        deadline = time.monotonic() + 60  # the worker may still be starting on a busy machine
        state = submitted["state"]
        while state == "pending" and time.monotonic() < deadline:
            time.sleep(0.2)
            state = call(base, f"/api/v1/requests/{submitted['id']}/", site.token)[1]["state"]
        assert state == "scheduled", logs(tmp_path)

        exits = stop(started)

    assert exits == {"asgi": 0, "worker": 0, "beat": 0}, logs(tmp_path)


def test_submit_is_saved_and_answered_201_while_redis_is_away(site, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        away = f"redis://127.0.0.1:{closed.getsockname()[1]}/0"
    env = site.env | {"REDIS_URL": away}  # and no Celery worker

    with processes({"asgi": command("ASGI server", port)}, env, tmp_path) as started:
        status, ready = wait_for(base, "/healthz/ready", tmp_path)
        assert status == 503 and ready["redis"] == "error" and ready["database"] == "ok"

        status, submitted = call(
            base, "/api/v1/requests/", site.token, {"name": "redis-away", "gpu_milli": 125}
        )
        assert status == 201, f"{submitted}\n{logs(tmp_path)}"

        with psycopg.connect(site.env["DATABASE_URL"]) as db:
            saved = db.execute("SELECT count(*) FROM scheduler_app_gpurequest WHERE name = 'redis-away'")
            assert saved.fetchone() == (1,)
        assert stop(started) == {"asgi": 0}, logs(tmp_path)
    assert "cannot reach Redis to queue a scheduling pass" in logs(tmp_path)


def test_a_hundred_concurrent_requests_stay_within_the_connection_pool(site, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    asgi = command("ASGI server", port)
    workers = int(asgi[asgi.index("--workers") + 1])
    bound = workers * settings.DATABASE_POOL_MAX_SIZE
    seen = []
    load_done = threading.Event()

    def count_connections():
        with psycopg.connect(site.admin_dsn, autocommit=True) as admin:
            while not load_done.is_set():
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [site.database]
                )
                seen.append(row.fetchone()[0])
                time.sleep(0.02)

    with processes({"asgi": asgi}, site.env, tmp_path) as started:
        assert wait_for(base, "/healthz/ready", tmp_path)[0] == 200
        sampler = threading.Thread(target=count_connections)
        sampler.start()
        try:
            with ThreadPoolExecutor(max_workers=100) as pool:
                statuses = list(
                    pool.map(lambda _: call(base, "/api/v1/requests/", site.token)[0], range(100))
                )
        finally:
            load_done.set()
            sampler.join()
        exits = stop(started)

    assert 0 < max(seen) <= bound, f"{max(seen)} connections for a pool of {bound}"
    assert statuses == [200] * 100, logs(tmp_path)
    assert exits == {"asgi": 0}, logs(tmp_path)
