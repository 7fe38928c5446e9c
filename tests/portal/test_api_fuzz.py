"""Property-based fuzzing of the whole API from its own OpenAPI schema (Schemathesis), on PostgreSQL.

Every operation is called as each kind of caller (a member, a team admin, an operator, a node agent
and nobody) against the portal's WSGI application holding the demo cluster, on PostgreSQL (a web
process's code, less the HTTP server, so thousands of calls take minutes). Half of the examples name
objects that
exist (the demo's requests, teams, pools, nodes), so the calls get past the lookup to the
validation behind it. Strings may hold lone surrogates and NUL bytes, and times reach year 1 and
year 9999 with any offset (tests/portal/fuzz_strategies.py). The checks: no 5xx, and every answer's
status, content type and body as the schema says. Each finding is listed with the curl command that
repeats it. A fixed seed and a bounded number of examples make it repeatable and keep it to minutes.
"""

import datetime as dt
import itertools
import json

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.core.wsgi import get_wsgi_application
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from demo.seed import seed_demo
from infra.api.throttling import FixedWindowThrottle
from notifications.services import create_channel
from scheduler_app.models import GpuRequest, Node
from scheduler_app.services.inventory import issue_agent_credential
from tests.portal.fuzz_strategies import extreme_date_times, extreme_dates, spiked

pytestmark = pytest.mark.postgres

SEED = 36
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Examples per operation: the callers whose rights an operation checks get the most.
EXAMPLES = {"member": 25, "team_admin": 25, "operator": 25, "node": 25, "anonymous": 6}
# Calls that end the caller's own access, or the fixture's, run last.
LAST = ("DELETE", "/revoke/", "/cancel/", "/release/")
FINDINGS_SHOWN = 3  # per operation: the first few say enough


@pytest.fixture
def portal(transactional_db, monkeypatch):
    """The demo cluster and the portal's WSGI application, its throttle out of the way of the fuzzer's
    pace. The calls run in the test's thread, on committed data, as a web process's would."""
    monkeypatch.setattr(FixedWindowThrottle, "THROTTLE_RATES", {"api": "1000000/min"})
    seed_demo()
    alice = get_user_model().objects.get(username="alice")
    create_channel(
        alice,
        team=alice.teams.get(slug="vision"),
        kind="webhook",
        name="hook",
        url="https://hooks.example.org/x",
    )
    return get_wsgi_application()


@pytest.fixture
def extreme_times():
    """Times from year 1 to year 9999, with offsets a day wide, for the schema's date-time and date."""
    from schemathesis.specs.openapi.formats import STRING_FORMATS, unregister_string_format

    own = {name: STRING_FORMATS.get(name) for name in ("date-time", "date")}
    schemathesis.openapi.format("date-time", extreme_date_times())
    schemathesis.openapi.format("date", extreme_dates())
    yield
    for name, strategy in own.items():  # Schemathesis' own again
        if strategy is None:
            unregister_string_format(name)
        else:
            schemathesis.openapi.format(name, strategy)


def credentials(role: str) -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from teams.services import create_api_token

    if role == "anonymous":
        return {}
    if role == "node":
        secret = issue_agent_credential(Node.objects.get(name="a100-80gb-node-01"))
    else:
        username = {"member": "bob", "team_admin": "alice", "operator": "ops"}[role]
        user = get_user_model().objects.get(username=username)
        secret = create_api_token(user, name="fuzz", expires_at=timezone.now() + dt.timedelta(days=1))[1]
    return {"Authorization": f"Bearer {secret}"}


def existing_objects() -> dict[str, dict[str, str]]:
    """Path parameters naming objects of the demo, per path segment before the parameter."""
    from django.contrib.auth import get_user_model

    from audit.models import Notice
    from billing_app.models import ResizeOffer
    from notifications.models import Channel
    from scheduler_app.models import Gpu, Pool, WhatIfRun
    from teams.models import Membership, TeamSecret

    placed = GpuRequest.objects.filter(allocations__gpu__node__name="a100-80gb-node-01").first()
    bob = get_user_model().objects.get(username="bob")
    spare = {}
    for model, key in (
        (Notice, "notices"),
        (ResizeOffer, "resize-offers"),
        (WhatIfRun, "what-if"),
        (Channel, "notification-channels"),
    ):
        if (pk := model.objects.values_list("pk", flat=True).first()) is not None:
            spare[key] = str(pk)
    return {
        "requests": str(placed.pk),
        "nodes": str(Node.objects.get(name="a100-80gb-node-01").pk),
        "gpus": str(Gpu.objects.filter(node__name="a100-80gb-node-01").first().pk),
        "pools": Pool.objects.order_by("name").first().name,
        "teams": "vision",
        "members": str(Membership.objects.get(user=bob).pk),
        "quotas": Pool.objects.order_by("name").first().name,
        "secrets": TeamSecret.objects.values_list("name", flat=True).first() or "HF_TOKEN",
        "users": "bob",
        **spare,
    }


def with_existing_objects(case, objects: dict[str, str]) -> None:
    """Names an existing object in each path parameter, by the path segment before it."""
    segments = case.operation.path.strip("/").split("/")
    for before, segment in itertools.pairwise(segments):
        name = segment.strip("{}")
        if segment.startswith("{") and name in (case.path_parameters or {}) and before in objects:
            case.path_parameters[name] = objects[before]


def fuzz_operation(operation, headers: dict, objects: dict, examples: int) -> list[str]:
    """The findings of one operation: each failed check with the curl command that repeats it."""
    findings: list[str] = []
    cases = st.one_of(
        operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
        operation.as_strategy(schemathesis.GenerationMode.NEGATIVE),
    )

    @seed(SEED)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, existing=st.booleans(), data=st.data())
    def run(case, existing, data):
        if existing:
            with_existing_objects(case, objects)
        sent = {}
        if isinstance(case.body, dict | list):
            # Sent as JSON text: Schemathesis checks a case's own body against the schema as UTF-8.
            sent["data"] = json.dumps(spiked(case.body, data)).encode()
        if case.query:
            case.query = spiked(case.query, data, surrogates=False)
        response = case.call(headers=headers, **sent)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Failure, FailureGroup) as found:
            if len(findings) < FINDINGS_SHOWN:
                findings.append(_finding(operation, case, sent, response, found, headers))

    run()
    return findings


def _finding(operation, case, sent, response, found, headers) -> str:
    failures = found.exceptions if isinstance(found, FailureGroup) else (found,)
    said = "; ".join(f"{f.title}: {' '.join(f.message.split())[:300]}" for f in failures)
    body = f"\n    body sent: {sent['data'].decode()[:500]}" if sent else ""
    return f"{operation.label} -> {response.status_code}: {said}\n    {case.as_curl_command(headers)}{body}"


@pytest.mark.parametrize("role", list(EXAMPLES))
def test_no_operation_answers_5xx_or_off_schema_to_any_input(portal, extreme_times, role):
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", portal)
    schema.config.generation.codec = None  # any code point but lone surrogates, which spiked() adds
    schema.config.generation.allow_x00 = True
    headers = credentials(role)
    objects = existing_objects()
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda op: any(mark in f"{op.method.upper()} {op.path}" for mark in LAST))
    assert len(operations) > 60, "the schema lists the whole API"

    findings = []
    for operation in operations:
        findings += fuzz_operation(operation, headers, objects, EXAMPLES[role])

    assert not findings, f"{len(findings)} finding(s) as {role}:\n" + "\n".join(findings)
