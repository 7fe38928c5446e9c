"""The agent's reclaim-notice watcher against a local HTTP server answering as each cloud's metadata
service does: the formats, 404s, malformed bodies, timeouts and a refused token."""

import datetime as dt
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.cloud_notices import CloudNoticeWatcher, ReclaimNotice

NOW = dt.datetime(2026, 12, 1, 6, 0, tzinfo=dt.UTC)
AWS_ACTION = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
GCP_PREEMPTED = "/computeMetadata/v1/instance/preempted"
AZURE_EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"


class FakeMetadata:
    """Routes (method, path) to (status, body), or to a function of the request's headers giving
    them; records each request. Status 0 means: hang past the client's timeout."""

    def __init__(self):
        self.routes: dict[tuple[str, str], tuple[int, str]] = {}
        self.seen: list[tuple[str, str, dict]] = []
        self.release = threading.Event()

    def handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                fake.seen.append((self.command, self.path, dict(self.headers)))
                route = fake.routes.get((self.command, self.path), (404, "Not Found"))
                status, body = route(self.headers) if callable(route) else route
                if status == 0:
                    fake.release.wait(5)
                    return
                payload = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PUT = _answer

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def metadata():
    fake = FakeMetadata()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_port}"
    yield fake
    fake.release.set()
    server.shutdown()
    server.server_close()


def watcher(metadata, provider, **kwargs):
    return CloudNoticeWatcher(provider, base_url=metadata.url, timeout_s=0.5, clock=lambda: NOW, **kwargs)


def aws_ready(metadata, token="tok-1"):
    metadata.routes[("PUT", "/latest/api/token")] = (200, token)


def test_aws_spot_action_is_a_notice_with_its_time_as_the_deadline(metadata):
    aws_ready(metadata)
    metadata.routes[("GET", AWS_ACTION)] = (200, '{"action": "terminate", "time": "2026-12-01T06:02:00Z"}')

    notice = watcher(metadata, "aws").check()

    assert notice == ReclaimNotice(
        "aws", dt.datetime(2026, 12, 1, 6, 2, tzinfo=dt.UTC), "aws:terminate:2026-12-01T06:02:00Z"
    )
    put = next(headers for method, _, headers in metadata.seen if method == "PUT")
    assert put["X-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    gets = [headers for method, _, headers in metadata.seen if method == "GET"]
    assert gets and all(h["X-aws-ec2-metadata-token"] == "tok-1" for h in gets)


def test_aws_without_an_instance_action_has_no_notice_and_reuses_its_token(metadata):
    aws_ready(metadata)
    aws = watcher(metadata, "aws")

    assert aws.check() is None
    assert aws.check() is None

    assert [method for method, _, _ in metadata.seen].count("PUT") == 1


def test_aws_token_refusal_is_no_notice_and_a_warning(metadata, caplog):
    metadata.routes[("PUT", "/latest/api/token")] = (403, "Forbidden")
    metadata.routes[("GET", AWS_ACTION)] = (200, '{"action": "stop", "time": "2026-12-01T06:02:00Z"}')

    with caplog.at_level(logging.WARNING, logger="agent.cloud_notices"):
        assert watcher(metadata, "aws").check() is None

    assert "token was refused (HTTP 403)" in caplog.text


def test_aws_expired_token_is_renewed_once(metadata):
    aws_ready(metadata, token="old")
    aws = watcher(metadata, "aws")
    assert aws.check() is None
    aws_ready(metadata, token="new")  # the old token has expired: only the new one reads
    metadata.routes[("GET", AWS_ACTION)] = lambda headers: (
        (200, '{"action": "hibernate", "time": "2026-12-01T06:00:30Z"}')
        if headers["X-aws-ec2-metadata-token"] == "new"
        else (401, "Unauthorized")
    )

    notice = aws.check()

    assert notice is not None and notice.notice_id == "aws:hibernate:2026-12-01T06:00:30Z"
    assert [m for m, _, _ in metadata.seen].count("PUT") == 2


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        '{"action": "reboot", "time": "2026-12-01T06:02:00Z"}',
        '{"action": "terminate"}',
        '{"action": "terminate", "time": "soon"}',
        '{"action": "terminate", "time": "2026-12-01T06:02:00"}',
    ],
)
def test_aws_malformed_instance_action_is_no_notice_and_a_warning(metadata, caplog, body):
    aws_ready(metadata)
    metadata.routes[("GET", AWS_ACTION)] = (200, body)

    with caplog.at_level(logging.WARNING, logger="agent.cloud_notices"):
        assert watcher(metadata, "aws").check() is None

    assert "aws reclaim notices" in caplog.text


def test_aws_notice_already_past_is_still_a_notice_with_its_own_deadline(metadata):
    aws_ready(metadata)
    metadata.routes[("GET", AWS_ACTION)] = (200, '{"action": "terminate", "time": "2026-12-01T05:58:00Z"}')

    notice = watcher(metadata, "aws").check()

    # The node may go any second: the agent acts at once, and the portal sees the true deadline.
    assert notice.deadline == dt.datetime(2026, 12, 1, 5, 58, tzinfo=dt.UTC) < NOW


def test_aws_rebalance_recommendation_is_only_logged_once(metadata, caplog):
    aws_ready(metadata)
    metadata.routes[("GET", AWS_REBALANCE)] = (200, '{"noticeTime": "2026-12-01T05:50:00Z"}')
    aws = watcher(metadata, "aws")

    with caplog.at_level(logging.INFO, logger="agent.cloud_notices"):
        assert aws.check() is None
        assert aws.check() is None

    assert caplog.text.count("recommends rebalancing") == 1


def test_gcp_preempted_true_gives_thirty_seconds_from_first_sight(metadata):
    metadata.routes[("GET", GCP_PREEMPTED)] = (200, "FALSE")
    moments = iter([NOW, NOW + dt.timedelta(seconds=5)])
    gcp = CloudNoticeWatcher("gcp", base_url=metadata.url, timeout_s=0.5, clock=lambda: next(moments))
    assert gcp.check() is None
    metadata.routes[("GET", GCP_PREEMPTED)] = (200, "TRUE")

    first, again = gcp.check(), gcp.check()

    # The second poll read the clock 5 s later, yet keeps the first deadline.
    assert first == again == ReclaimNotice("gcp", NOW + dt.timedelta(seconds=30), "gcp:preempted")
    assert all(h["Metadata-Flavor"] == "Google" for _, _, h in metadata.seen)


def test_gcp_answer_other_than_true_or_false_is_no_notice(metadata, caplog):
    metadata.routes[("GET", GCP_PREEMPTED)] = (200, "<html>captive portal</html>")

    with caplog.at_level(logging.WARNING, logger="agent.cloud_notices"):
        assert watcher(metadata, "gcp").check() is None

    assert "not TRUE or FALSE" in caplog.text


def azure_events(*events, incarnation=3):
    return json.dumps({"DocumentIncarnation": incarnation, "Events": list(events)})


def azure_event(event_id, event_type="Preempt", not_before="Tue, 01 Dec 2026 06:00:30 GMT"):
    return {
        "EventId": event_id,
        "EventStatus": "Scheduled",
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-1"],
        "NotBefore": not_before,
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


def test_azure_preempt_event_is_a_notice_with_not_before_as_the_deadline(metadata):
    metadata.routes[("GET", AZURE_EVENTS)] = (200, azure_events(azure_event("E-1")))

    notice = watcher(metadata, "azure").check()

    assert notice == ReclaimNotice("azure", dt.datetime(2026, 12, 1, 6, 0, 30, tzinfo=dt.UTC), "azure:E-1")
    assert metadata.seen[0][2]["Metadata"] == "true"


def test_azure_other_events_are_ignored(metadata):
    metadata.routes[("GET", AZURE_EVENTS)] = (
        200,
        azure_events(azure_event("R-1", "Reboot"), azure_event("F-1", "Freeze")),
    )

    assert watcher(metadata, "azure").check() is None


def test_azure_started_preempt_keeps_the_deadline_first_seen(metadata):
    metadata.routes[("GET", AZURE_EVENTS)] = (200, azure_events(azure_event("E-2")))
    azure = watcher(metadata, "azure")
    first = azure.check()
    metadata.routes[("GET", AZURE_EVENTS)] = (200, azure_events(azure_event("E-2", not_before="")))

    again = azure.check()

    assert again == first and again.deadline == dt.datetime(2026, 12, 1, 6, 0, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "body",
    [
        "{",
        '{"DocumentIncarnation": 1}',
        '{"DocumentIncarnation": 1, "Events": ["Preempt"]}',
        azure_events(azure_event("E-3", not_before="tomorrow")),
        azure_events({"EventType": "Preempt", "NotBefore": "Tue, 01 Dec 2026 06:00:30 GMT"}),
    ],
)
def test_azure_malformed_answer_is_no_notice(metadata, caplog, body):
    metadata.routes[("GET", AZURE_EVENTS)] = (200, body)

    with caplog.at_level(logging.WARNING, logger="agent.cloud_notices"):
        assert watcher(metadata, "azure").check() is None

    assert "azure reclaim notices" in caplog.text


def test_a_metadata_service_that_hangs_is_no_notice_within_the_timeout(metadata):
    metadata.routes[("GET", GCP_PREEMPTED)] = (0, "")
    started = time.monotonic()

    assert watcher(metadata, "gcp").check() is None

    assert time.monotonic() - started < 3


def test_an_unreachable_metadata_service_warns_once_per_outage(caplog):
    down = CloudNoticeWatcher("azure", base_url="http://127.0.0.1:9", timeout_s=0.5)

    with caplog.at_level(logging.WARNING, logger="agent.cloud_notices"):
        assert down.check() is None
        assert down.check() is None

    assert caplog.text.count("azure reclaim notices") == 1


@pytest.mark.parametrize(
    ("route", "body", "provider"),
    [
        (("GET", AZURE_EVENTS), azure_events(), "azure"),
        (("GET", GCP_PREEMPTED), "FALSE", "gcp"),
        (("PUT", "/latest/api/token"), "tok", "aws"),
    ],
)
def test_auto_keeps_the_provider_that_answers(metadata, route, body, provider):
    metadata.routes[route] = (200, body)
    auto = watcher(metadata, "auto")

    assert auto.check() is None

    assert auto.provider == provider


def test_auto_with_no_answer_probes_again_only_after_five_minutes(metadata):
    now = [NOW]
    auto = CloudNoticeWatcher("auto", base_url=metadata.url, timeout_s=0.5, clock=lambda: now[0])
    assert auto.check() is None
    probes = len(metadata.seen)
    now[0] += dt.timedelta(minutes=4)
    assert auto.check() is None
    assert len(metadata.seen) == probes  # too soon: no probe
    metadata.routes[("GET", AZURE_EVENTS)] = (200, azure_events(azure_event("E-9")))  # it has started
    now[0] += dt.timedelta(minutes=1)

    notice = auto.check()

    assert auto.provider == "azure" and notice.notice_id == "azure:E-9"


def test_an_unexpected_error_is_logged_not_raised(metadata, caplog):
    metadata.routes[("GET", GCP_PREEMPTED)] = (200, "TRUE")
    gcp = CloudNoticeWatcher("gcp", base_url=metadata.url, clock=lambda: None)  # a broken clock

    with caplog.at_level(logging.ERROR, logger="agent.cloud_notices"):
        assert gcp.check() is None

    assert "reading the gcp reclaim notice" in caplog.text and "TypeError" in caplog.text


def test_an_unknown_provider_is_refused():
    with pytest.raises(ValueError, match="unknown cloud provider 'ibm'"):
        CloudNoticeWatcher("ibm")
