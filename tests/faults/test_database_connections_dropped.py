"""Fault: PostgreSQL ends every session of the portal's production processes (pg_terminate_backend, as a
restart or failover does) three times while 20 clients read, submit and cancel. No call answers 500: a
read whose session ended is run again on a fresh connection (infra.postgresql), what cannot be
finished answers 503 with Retry-After. Every write that failed either succeeds when sent again with
its Idempotency-Key (answered from the key when it had been applied, done then when it had not) or was
never applied; nothing is applied twice, no accepted request is lost, and the invariants hold."""

import datetime as dt
import http.client
import json
import os
import random
import secrets
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from bench.production import free_port, portal_processes
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from teams.services import create_api_token
from tests.faults.conftest import REPO, settle_and_check
from tests.portal.test_production_mode import logs, processes, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLIENTS = 20
CUTS = 3
CUT_EVERY_S = 2.0  # the load runs CUT_EVERY_S before, between and after the three cuts
WEB_SESSIONS = "fault-test-web"


@dataclass
class Write:
    what: str  # "submit" or "cancel"
    path: str
    body: dict | None
    key: str
    name: str  # the request's name (a submit's own, a cancel's target's)
    status: int  # HTTP status, 0 when no answer came


def test_connections_terminated_three_times_under_a_twenty_client_load_answer_no_500(
    make_node, team, member, tmp_path
):
    make_node("node-1", gpus=4)
    _, token = create_api_token(member, name="load", expires_at=timezone.now() + dt.timedelta(hours=1))
    database = connection.settings_dict["NAME"]
    # Every portal process names its sessions, so the cuts reach them and none of this test process's.
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
        "API_THROTTLE_RATE": "1000000/min",  # the clients call as fast as they can
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    reads: list[int] = []
    writes: list[Write] = []
    cuts: list[int] = []
    done = threading.Event()

    def client(index: int):
        rng = random.Random(index)
        pending: list[tuple[int, str]] = []  # (id, name) of this client's requests not yet cancelled
        sent = 0
        while not done.is_set():
            roll = rng.random()
            if roll < 0.3:
                path = (
                    f"/api/v1/requests/{pending[-1][0]}/" if pending and roll < 0.1 else "/api/v1/requests/"
                )
                reads.append(send(base, "GET", path, token)[0])
            elif roll < 0.45 and pending:
                target, name = pending.pop(rng.randrange(len(pending)))
                write = Write(
                    "cancel", f"/api/v1/requests/{target}/cancel/", None, str(uuid.uuid4()), name, 0
                )
                write.status = send(base, "POST", write.path, token, key=write.key)[0]
                writes.append(write)
            else:
                sent += 1
                name = f"c{index}-{sent}"
                body = {"name": name, "gpu_milli": 125}
                write = Write("submit", "/api/v1/requests/", body, str(uuid.uuid4()), name, 0)
                write.status, answer, _ = send(base, "POST", write.path, token, body, write.key)
                writes.append(write)
                if write.status == 201:
                    pending.append((answer["id"], name))

    def cut_the_portals_sessions():
        with psycopg.connect(url, autocommit=True) as admin:
            while len(cuts) < CUTS and not done.wait(CUT_EVERY_S):
                cut = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = %s AND application_name = %s AND pid <> pg_backend_pid()",
                    [database, WEB_SESSIONS],
                )
                cuts.append(cut.fetchone()[0])
        done.wait(CUT_EVERY_S)
        done.set()

    with processes(portal_processes(port, tmp_path), env, tmp_path):
        assert wait_for(base, "/healthz/ready", tmp_path)[0] == 200, logs(tmp_path)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        threads.append(threading.Thread(target=cut_the_portals_sessions))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        failed = [w for w in writes if w.status not in (200, 201)]
        applied_before = {id(w): _applied(w) for w in failed}
        retried = {id(w): send(base, "POST", w.path, token, w.body, w.key) for w in failed}

    statuses = Counter(reads) + Counter(w.status for w in writes)
    print(  # the figures, shown with -s or when an assertion fails
        f"\n{len(reads) + len(writes)} calls, cuts {cuts}: reads {dict(Counter(reads))}, writes "
        f"{dict(Counter(w.status for w in writes))}; {len(failed)} failed writes retried with their keys, "
        f"{sum(applied_before.values())} of them applied before the retry"
    )
    assert len(cuts) == CUTS and min(cuts) > 0, cuts  # the fault happened, three times
    assert statuses[500] == 0, f"{statuses}\n{logs(tmp_path)}"
    assert set(statuses) <= {200, 201, 503}, f"{statuses}\n{logs(tmp_path)}"
    for write in failed:
        status, _, headers = retried[id(write)]
        assert status == (201 if write.what == "submit" else 200), (write, retried[id(write)])
        # Answered from its key exactly when its first try had been applied: key and write commit together.
        assert (headers.get("Idempotent-Replayed") == "true") is applied_before[id(write)], write
    twice = GpuRequest.objects.values("name").annotate(n=Count("id")).filter(n__gt=1)
    assert not twice, list(twice)
    cancelled = {w.name for w in writes if w.what == "cancel"}
    assert set(GpuRequest.objects.filter(state="cancelled").values_list("name", flat=True)) == cancelled
    submitted = {w.name for w in writes if w.what == "submit"}
    accepted = list(GpuRequest.objects.filter(name__in=submitted).values_list("pk", flat=True))
    assert len(accepted) == len(submitted)  # every submit made its request once, at first or on its retry
    run_scheduling_pass()
    settle_and_check(accepted=accepted)


def _applied(write: Write) -> bool:
    """Whether the write's first try is in the database."""
    made = GpuRequest.objects.filter(name=write.name)
    return made.exists() if write.what == "submit" else made.filter(state="cancelled").exists()


def send(base: str, method: str, path: str, token: str, body: dict | None = None, key: str | None = None):
    """(status, JSON body, headers) of one call; status 0 when the connection failed without an answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    if key is not None:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read() or b"null"), answer.headers
    except urllib.error.HTTPError as error:
        return error.code, {"text": error.read().decode(errors="replace")[:500]}, error.headers
    except (OSError, http.client.HTTPException):
        return 0, None, {}
