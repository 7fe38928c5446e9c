"""Spot reclaim notices from the cloud's instance metadata endpoint, polled by the agent.

Each provider answers differently:

- AWS (IMDSv2): a session token from `PUT /latest/api/token`, then
  `GET /latest/meta-data/spot/instance-action`: "If Amazon EC2 is not stopping or terminating the
  instance ... spot/instance-action is not present in the instance metadata" (404); otherwise
  `{"action": "terminate"|"stop"|"hibernate", "time": "2026-12-01T07:00:00Z"}`. "A Spot Instance
  interruption notice is a warning that is issued two minutes before Amazon EC2 stops or terminates
  your Spot Instance ... We recommend that you check for these interruption notices every 5
  seconds." (docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
  A rebalance recommendation (`events/recommendations/rebalance`) is an early hint only: logged.
- GCP: `curl "http://metadata.google.internal/computeMetadata/v1/instance/preempted"
  -H "Metadata-Flavor: Google"` answers `TRUE` or `FALSE` (cloud.google.com/compute/docs/instances/
  preemptible, "Detecting if an instance was preempted"); the VM then has about 30 seconds, so the
  deadline is when the agent first saw TRUE plus 30 s.
- Azure: Scheduled Events, `GET /metadata/scheduledevents?api-version=2020-07-01` with
  `Metadata: true`: `{"DocumentIncarnation": n, "Events": [{"EventId", "EventType": "Preempt",
  "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", ...}]}`, a Spot eviction being "| Preempt | 30 seconds |"
  of minimum notice; an event "will move into the started state after ... the not before time
  passes" (its NotBefore then empty), and "You should expect a delayed response in your first call
  of up to two minutes" (learn.microsoft.com/azure/virtual-machines/linux/scheduled-events).

The watcher never raises into the agent: a network error or a malformed answer is logged and read
as "no notice".
"""

import datetime as dt
import email.utils
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

log = logging.getLogger(__name__)

PROVIDERS = ("aws", "gcp", "azure")
DEFAULT_BASE_URLS = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
}
AWS_TOKEN_TTL_S = 21600  # the most IMDSv2 grants
AWS_ACTIONS = ("terminate", "stop", "hibernate")
GCP_GRACE = dt.timedelta(seconds=30)
REPROBE = dt.timedelta(minutes=5)  # "auto" with no answer: a few seconds of timeouts this often


@dataclass(frozen=True)
class ReclaimNotice:
    """The cloud will take this node back at `deadline` (aware UTC). `notice_id` is the same on every
    poll that sees the same notice, so the portal can drop repeats."""

    provider: str
    deadline: dt.datetime
    notice_id: str


class NoAnswer(Exception):
    """The endpoint did not answer as the provider's metadata service does."""


class CloudNoticeWatcher:
    """Polls one provider's notice endpoint. "auto" probes each provider on the first check and keeps
    the first that answers; while none does (not a cloud VM, or Azure's Scheduled Events still
    starting), it probes again every REPROBE and reports no notice meanwhile."""

    def __init__(
        self,
        provider: str = "auto",
        base_url: str | None = None,
        timeout_s: float = 1.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ):
        if provider not in (*PROVIDERS, "auto"):
            raise ValueError(f"unknown cloud provider {provider!r}: use one of aws, gcp, azure or auto")
        self.provider = provider
        self.base_url = base_url.rstrip("/") if base_url else None
        self.timeout_s = timeout_s
        self.clock = clock
        # Metadata endpoints are link-local: never through a proxy from the environment.
        self.session = requests.Session()
        self.session.trust_env = False
        self._aws_token: tuple[str, float] | None = None  # the token and when to renew it (monotonic)
        self._rebalance_seen: str | None = None
        self._first_deadlines: dict[str, dt.datetime] = {}
        self._failing = False
        self._next_probe_at: dt.datetime | None = None

    def check(self) -> ReclaimNotice | None:
        """The pending reclaim notice, or None (also on any error, which is logged)."""
        try:
            return self._check()
        except Exception:  # a bug here must not stop the agent's rounds
            log.exception("reading the %s reclaim notice", self.provider)
            return None

    def _check(self) -> ReclaimNotice | None:
        if self.provider == "auto":
            return self._probe()
        try:
            notice = self._poll(self.provider)
        except NoAnswer as error:
            # One warning per outage: the agent polls every round.
            (log.debug if self._failing else log.warning)("%s reclaim notices: %s", self.provider, error)
            self._failing = True
            return None
        self._failing = False
        return notice

    def _probe(self) -> ReclaimNotice | None:
        now = self.clock()
        if self._next_probe_at is not None and now < self._next_probe_at:
            return None
        for provider in PROVIDERS:
            try:
                notice = self._poll(provider)
            except NoAnswer as error:
                log.debug("%s metadata probe: %s", provider, error)
                continue
            log.info("watching %s reclaim notices", provider)
            self.provider = provider
            return notice
        if self._next_probe_at is None:
            log.warning("no cloud metadata endpoint answered: probing again every %d s", REPROBE.seconds)
        # Not given up for good: Azure's first Scheduled Events call may take up to two minutes.
        self._next_probe_at = now + REPROBE
        return None

    def _poll(self, provider: str) -> ReclaimNotice | None:
        notice = {"aws": self._aws, "gcp": self._gcp, "azure": self._azure}[provider]()
        if notice is None:
            return None
        # The first deadline seen for a notice stands, so repeats carry the same one.
        deadline = self._first_deadlines.setdefault(notice.notice_id, notice.deadline)
        return ReclaimNotice(notice.provider, deadline, notice.notice_id)

    def _url(self, provider: str, path: str) -> str:
        return (self.base_url or DEFAULT_BASE_URLS[provider]) + path

    def _request(self, method: str, url: str, headers: dict) -> requests.Response:
        try:
            return self.session.request(method, url, headers=headers, timeout=self.timeout_s)
        except requests.RequestException as error:
            raise NoAnswer(f"{method} {url}: {error.__class__.__name__}: {error}") from error

    def _aws(self) -> ReclaimNotice | None:
        answer = self._aws_get("/latest/meta-data/spot/instance-action")
        self._aws_rebalance()
        if answer.status_code == 404:
            return None
        body = _json(answer)
        action, time_text = body.get("action"), body.get("time")
        if action not in AWS_ACTIONS or not isinstance(time_text, str):
            raise NoAnswer(f"unexpected spot/instance-action {answer.text[:200]!r}")
        return ReclaimNotice("aws", _iso_utc(time_text), f"aws:{action}:{time_text}")

    def _aws_rebalance(self) -> None:
        """Logged only: it is a hint, not a deadline, and its failure must not hide a notice."""
        try:
            answer = self._aws_get("/latest/meta-data/events/recommendations/rebalance")
        except NoAnswer as error:
            log.debug("aws rebalance recommendation: %s", error)
            return
        if answer.status_code == 200 and answer.text != self._rebalance_seen:
            self._rebalance_seen = answer.text
            log.info("AWS recommends rebalancing away from this spot node: %s", answer.text[:200])

    def _aws_get(self, path: str) -> requests.Response:
        """GET with an IMDSv2 token; an expired token (401) is renewed once."""
        for attempt in range(2):
            headers = {"X-aws-ec2-metadata-token": self._aws_session_token(renew=attempt > 0)}
            answer = self._request("GET", self._url("aws", path), headers)
            if answer.status_code != 401:
                break
        if answer.status_code not in (200, 404):
            raise NoAnswer(f"GET {path}: HTTP {answer.status_code}")
        return answer

    def _aws_session_token(self, *, renew: bool) -> str:
        if self._aws_token and not renew and time.monotonic() < self._aws_token[1]:
            return self._aws_token[0]
        answer = self._request(
            "PUT",
            self._url("aws", "/latest/api/token"),
            {"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)},
        )
        if answer.status_code != 200 or not answer.text.strip():
            raise NoAnswer(f"the IMDSv2 token was refused (HTTP {answer.status_code})")
        self._aws_token = (answer.text.strip(), time.monotonic() + AWS_TOKEN_TTL_S / 2)
        return self._aws_token[0]

    def _gcp(self) -> ReclaimNotice | None:
        answer = self._request(
            "GET", self._url("gcp", "/computeMetadata/v1/instance/preempted"), {"Metadata-Flavor": "Google"}
        )
        if answer.status_code != 200:
            raise NoAnswer(f"instance/preempted: HTTP {answer.status_code}")
        value = answer.text.strip()
        if value not in ("TRUE", "FALSE"):
            raise NoAnswer(f"instance/preempted answered {value[:200]!r}, not TRUE or FALSE")
        if value == "FALSE":
            return None
        return ReclaimNotice("gcp", self.clock() + GCP_GRACE, "gcp:preempted")

    def _azure(self) -> ReclaimNotice | None:
        answer = self._request(
            "GET",
            self._url("azure", "/metadata/scheduledevents?api-version=2020-07-01"),
            {"Metadata": "true"},
        )
        if answer.status_code != 200:
            raise NoAnswer(f"scheduledevents: HTTP {answer.status_code}")
        events = _json(answer).get("Events")
        if not isinstance(events, list) or not all(isinstance(event, dict) for event in events):
            raise NoAnswer(f"scheduledevents without an Events list: {answer.text[:200]!r}")
        notices = []
        for event in events:
            if event.get("EventType") != "Preempt":
                log.debug("ignoring the Azure %s event %s", event.get("EventType"), event.get("EventId"))
                continue
            event_id, not_before = event.get("EventId"), event.get("NotBefore")
            if not isinstance(event_id, str) or not event_id or not isinstance(not_before, str):
                raise NoAnswer(f"a Preempt event without EventId or NotBefore: {event!r:.200}")
            # An empty NotBefore: the eviction has started.
            deadline = _rfc1123_utc(not_before) if not_before else self.clock()
            notices.append(ReclaimNotice("azure", deadline, f"azure:{event_id}"))
        return min(notices, key=lambda notice: notice.deadline, default=None)


def _json(answer: requests.Response) -> dict:
    try:
        body = answer.json()
    except ValueError as error:
        raise NoAnswer(f"not JSON: {answer.text[:200]!r}") from error
    if not isinstance(body, dict):
        raise NoAnswer(f"not a JSON object: {answer.text[:200]!r}")
    return body


def _iso_utc(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise NoAnswer(f"not an ISO 8601 time: {text[:100]!r}") from error
    if moment.tzinfo is None:
        raise NoAnswer(f"a time without its zone: {text[:100]!r}")
    return moment.astimezone(dt.UTC)


def _rfc1123_utc(text: str) -> dt.datetime:
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError) as error:
        raise NoAnswer(f"not an RFC 1123 date: {text[:100]!r}") from error
    if moment.tzinfo is None:
        raise NoAnswer(f"a date without its zone: {text[:100]!r}")
    return moment.astimezone(dt.UTC)
