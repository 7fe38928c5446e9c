"""Fault: PostgreSQL drops the portal's connections (pg_terminate_backend on every one of the web
processes' sessions, as a restart or failover does, several times) while clients submit. No request
the portal accepted is lost, errors stay with the requests whose connection was cut mid-flight (the
pool tests a connection before lending it: portal.postgresql), the invariants hold."""

import datetime as dt
import os
import secrets
import threading
import time
import urllib.parse
from collections import Counter

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from bench.production import command, free_port
from scheduler_app.scheduling import run_scheduling_pass
from teams.services import create_api_token
from tests.faults.conftest import REPO, settle_and_check
from tests.portal.test_production_mode import call, logs, processes, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLIENTS = 4
LOAD_S = 6
KILL_EVERY_S = 1.5
WEB_SESSIONS = "fault-test-web"


def test_dropped_database_connections_under_load_lose_no_accepted_request(make_node, team, member, tmp_path):
    make_node("node-1", gpus=4)
    _, token = create_api_token(member, name="load", expires_at=timezone.now() + dt.timedelta(hours=1))
    database = connection.settings_dict["NAME"]
    # The web process names its sessions, so the cuts reach them and none of this test process's.
    url = (
        urllib.parse.urlsplit(os.environ["DATABASE_URL"])
        ._replace(path=f"/{database}", query=f"application_name={WEB_SESSIONS}")
        .geturl()
    )
    env = os.environ | {
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "API_THROTTLE_RATE": "1000000/min",  # the clients submit as fast as they can
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    answers: list[tuple[int, dict]] = []
    kills = []
    done = threading.Event()

    def submit(client: int):
        sent = 0
        while not done.is_set():
            body = {"name": f"c{client}-{sent}", "gpu_milli": 125}
            answers.append(call(base, "/api/v1/requests/", token, body))
            sent += 1

    def terminate_the_portals_connections():
        with psycopg.connect(url, autocommit=True) as admin:
            while not done.wait(KILL_EVERY_S):
                cut = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = %s AND application_name = %s AND pid <> pg_backend_pid()",
                    [database, WEB_SESSIONS],
                )
                kills.append(cut.fetchone()[0])

    with processes({"asgi": command("ASGI server", port)}, env, tmp_path):
        assert wait_for(base, "/healthz/ready", tmp_path)[0] == 200, logs(tmp_path)
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(CLIENTS)]
        threads.append(threading.Thread(target=terminate_the_portals_connections))
        for thread in threads:
            thread.start()
        time.sleep(LOAD_S)
        done.set()
        for thread in threads:
            thread.join()
        after = call(base, "/api/v1/requests/", token, {"name": "after", "gpu_milli": 125})

    statuses = Counter(status for status, _ in answers)
    assert len(kills) >= 3 and min(kills) > 0, kills  # the fault happened, several times
    assert after[0] == 201, after  # the portal recovers as soon as the cuts stop
    failed = sum(n for status, n in statuses.items() if status != 201)
    # No storm: at most the requests in flight at each cut fail, not one per pooled connection cut.
    assert failed <= CLIENTS * len(kills), f"{statuses}, cuts {kills}\n{logs(tmp_path)}"
    accepted = [body["id"] for status, body in answers if status == 201] + [after[1]["id"]]
    run_scheduling_pass()
    settle_and_check(accepted=accepted)
