"""Production mode for real: the README's production steps and commands, on PostgreSQL and Redis.

The scratch database gets the README's steps before the first start, run from the checkout as written
and without a terminal. Each test starts the processes exactly as the README's production table
writes them (only the port is a free one), from the checkout, with DEBUG=0, and calls them as the TLS
proxy on the same host would (X-Forwarded-Proto, which uvicorn believes from loopback by default).
Every process is started in its own process group and killed with it whatever happens, and the
scratch database is dropped at the end.
"""

import http.client
import json
import os
import re
import secrets
import signal
import socket
import statistics
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

from bench.production import command, first_start_steps, free_port

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
    var_dir: Path
    first_start: list[str]  # what each step before the first start printed


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A scratch database (named after DATABASE_URL's plus a suffix) through the README's steps before
    the first start and after an update, then a user, team, pool, node and API token; the environment
    the production processes get (the var directory and static files in a scratch folder, not the
    checkout)."""
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
    scratch = tmp_path_factory.mktemp("production")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_", "PYTHON"))}
    env |= {
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "DATABASE_URL": urllib.parse.urlsplit(os.environ["DATABASE_URL"])
        ._replace(path=f"/{database}")
        .geturl(),
        "REDIS_URL": settings.REDIS_URL,
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PORTAL_VAR_DIR": str(scratch / "var"),  # not there yet: beat makes it
        "STATIC_ROOT": str(scratch / "static"),
        "SCHEDULER_INTERVAL_S": "3600",  # so only the pass a submit asks for can schedule in time
    }
    try:
        first_start = [run_unattended(argv, env) for argv in first_start_steps()]
        for argv in first_start_steps():  # again, as after an update: collectstatic finds its files
            run_unattended(argv, env)
        seeded = run_unattended(["python", "manage.py", "shell", "-c", SEED], env)
        yield Site(
            env=env,
            database=database,
            admin_dsn=admin_dsn,
            token=seeded.strip().splitlines()[-1],
            var_dir=scratch / "var",
            first_start=first_start,
        )
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def run_unattended(argv: list[str], env: dict[str, str]) -> str:
    """Run one step from the checkout with no terminal (stdin empty); what it printed. A step that
    asks a question or fails stops the test with its output."""
    done = subprocess.run(
        argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@contextmanager
def processes(argvs: dict[str, list[str]], env: dict[str, str], workdir: Path):
    """Start each argv in its own process group, from the checkout as the README says (the logs go to
    `workdir`); on the way out kill every group that is left."""
    started: dict[str, subprocess.Popen] = {}
    try:
        for name, argv in argvs.items():
            log = (workdir / f"{name}.log").open("w")
            started[name] = subprocess.Popen(
                argv,
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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
    """(status, JSON body) of one request, sent as the TLS proxy on the same host sends it; HTTP
    errors are answers too."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}{path}", data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    request.add_header("X-Forwarded-Proto", "https")
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
    beat_files_before = set(ROOT.glob("celerybeat-schedule*"))

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
    # Beat keeps its schedule under the var directory, not in the checkout it was started from.
    assert set(ROOT.glob("celerybeat-schedule*")) == beat_files_before
    assert list(site.var_dir.glob("celerybeat-schedule*")), logs(tmp_path)


def fetch(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one GET, redirects not followed."""
    url = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, {name.lower(): value for name, value in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_pages_and_static_files_are_served_behind_the_proxy_and_plain_http_is_redirected(site, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proxied = {"X-Forwarded-Proto": "https"}

    with processes({"asgi": command("ASGI server", port)}, site.env, tmp_path) as started:
        wait_for(base, "/healthz/live", tmp_path)
        plain = fetch(base, "/accounts/login/")
        status, _, page = fetch(base, "/accounts/login/", proxied)
        assert status == 200, f"{page[:500]!r}\n{logs(tmp_path)}"
        stylesheet = re.search(rb'href="(/static/css/portal\.[0-9a-f]+\.css)"', page)
        assert stylesheet, page[:2000]  # collectstatic's hashed name
        static = fetch(base, stylesheet.group(1).decode(), proxied)
        assert stop(started) == {"asgi": 0}, logs(tmp_path)

    assert plain[0] == 301 and plain[1]["location"] == f"https://127.0.0.1:{port}/accounts/login/"
    assert static[0] == 200 and static[1]["content-type"].startswith("text/css")
    assert "Demo cluster ready." in "".join(site.first_start)
    with psycopg.connect(site.env["DATABASE_URL"]) as db:
        users = db.execute("SELECT username FROM auth_user WHERE username IN ('ops', 'alice', 'bob')")
        assert sorted(row[0] for row in users) == ["alice", "bob", "ops"]


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


@contextmanager
def black_hole():
    """A Redis URL on a loopback listener that accepts every connection and never answers (a hung
    server, a dropped route); the connections stay open until the end."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    held = []

    def accept():
        with suppress(OSError):  # the listener closed: done
            while True:
                held.append(listener.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()
        for connection in held:
            connection.close()


BLACK_HOLE_CLIENTS = 8
BLACK_HOLE_WARM_UP_S = 2  # each worker's first calls load Django's views: not counted
BLACK_HOLE_LOAD_S = 8


def test_a_redis_that_never_answers_keeps_the_api_fast_and_liveness_instant(site, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    api: list[tuple[int, float]] = []  # (status, seconds) of each API call
    live: list[tuple[int, float]] = []  # the same for each liveness probe
    counting, done = threading.Event(), threading.Event()

    def timed(answers, path, token="", body=None):
        counted, started = counting.is_set(), time.monotonic()
        status = call(base, path, token, body)[0]
        if counted:
            answers.append((status, time.monotonic() - started))

    def client(number: int):
        sent = 0
        while not done.is_set():
            if sent % 2:
                timed(
                    api, "/api/v1/requests/", site.token, {"name": f"hole-{number}-{sent}", "gpu_milli": 125}
                )
            else:
                timed(api, "/api/v1/requests/?state=pending", site.token)
            sent += 1

    def prober():
        while not done.wait(0.1):
            timed(live, "/healthz/live")

    with black_hole() as away:
        env = site.env | {
            "REDIS_URL": away,
            "API_THROTTLE_RATE": "1000000/min",
            # 3 HTTP threads a worker: the clients outnumber them, so a probe that needed one would wait.
            "DATABASE_POOL_MAX_SIZE": "3",
        }
        with processes({"asgi": command("ASGI server", port)}, env, tmp_path) as started:
            wait_for(base, "/healthz/live", tmp_path)
            with ThreadPoolExecutor(BLACK_HOLE_CLIENTS + 1) as pool:
                running = [pool.submit(client, n) for n in range(BLACK_HOLE_CLIENTS)] + [pool.submit(prober)]
                done.wait(BLACK_HOLE_WARM_UP_S)
                counting.set()
                done.wait(BLACK_HOLE_LOAD_S)  # the load runs this long
                done.set()
                for clients in running:
                    clients.result()  # a client's error fails the test
            ready = call(base, "/healthz/ready")
            exits = stop(started)

    assert len(api) >= 20 and len(live) >= 20, f"{len(api)} API calls and {len(live)} probes answered"
    seconds = sorted(s for _, s in api)
    p95 = statistics.quantiles(seconds, n=20)[-1]
    live_s = sorted(s for _, s in live)
    print(
        f"black-hole Redis: {len(api)} API calls, p50 {statistics.median(seconds) * 1000:.0f} ms,"
        f" p95 {p95 * 1000:.0f} ms, max {seconds[-1] * 1000:.0f} ms; liveness over {len(live)} probes:"
        f" p50 {statistics.median(live_s) * 1000:.0f} ms, max {live_s[-1] * 1000:.0f} ms"
    )
    assert {status for status, _ in api} <= {200, 201}, logs(tmp_path)
    assert p95 < 1.0, f"p95 {p95:.3f} s\n{logs(tmp_path)}"
    assert {status for status, _ in live} == {200}
    # A probe waits on no thread: 100 ms covers the machine's own scheduling of this load's processes;
    # none may come near a probe's usual 1 s timeout (behind busy threads one took 13 s).
    assert statistics.quantiles(live_s, n=20)[-1] < 0.1 and live_s[-1] < 1.0, live_s
    assert ready == (503, {"status": "unavailable", "database": "ok", "redis": "error"})
    assert exits == {"asgi": 0}, logs(tmp_path)
