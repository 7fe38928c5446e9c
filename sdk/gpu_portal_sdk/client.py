"""ResourceManager: the portal's REST API (/api/v1/) as Python calls, with retries and typed errors."""

from __future__ import annotations  # the `list` method would shadow the builtin in annotations

import datetime as dt
import email.utils
import inspect
import math
import random as _random
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import requests

from gpu_portal_sdk.config import resolve
from gpu_portal_sdk.errors import (
    ConnectionFailedError,
    NotFoundError,
    PortalError,
    RateLimitedError,
    RequestFailedError,
    ResourceBusyError,
    ValidationError,
    error_for_status,
)
from gpu_portal_sdk.models import (
    Estimate,
    Health,
    LogTail,
    NodeHealth,
    Price,
    Quote,
    Recommendation,
    Resource,
    Statement,
    Team,
    Utilization,
)
from gpu_portal_sdk.retry import RetryPolicy, parse_retry_after
from gpu_portal_sdk.version import __version__

# The one source is the portal's scheduler_app.constants.MILLI_PER_GPU; the SDK is its own distribution,
# installed without the portal, so it keeps this copy.
MILLI_PER_GPU = 1000
DEFAULT_CHECKPOINT_INTERVAL_S = 900
DEFAULT_WAIT_S = 60.0  # request_allocation: how long a script waits for capacity before ResourceBusyError
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"


def _request_body(
    task_type: str = "training",
    min_gpu: float = 0.5,
    prefer_spot: bool = True,
    name: str | None = None,
    num_gpus: int = 1,
    pool: str | None = None,
    gpu_model: str | None = None,
    gpu_memory_mib: int | None = None,
    max_duration_s: int | None = None,
    checkpoint_interval_s: int | None = None,
    pinned: bool = False,
    priority: int = 0,
    command: str = "",
    team: str | None = None,
    allow_on_demand_fallback: bool = True,
    workload_key: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> dict:
    """The API body of a request: the one list of the arguments request_allocation and estimate take."""
    gpu_milli, num_gpus = _shape(min_gpu, num_gpus)
    body = {
        "team": team,
        "name": name or f"{task_type}-{secrets.token_hex(3)}",
        "task_type": task_type,
        "gpu_milli": gpu_milli,
        "num_gpus": num_gpus,
        "pool": pool,
        "gpu_model": gpu_model,
        "gpu_memory_mib": gpu_memory_mib,
        "max_duration_s": max_duration_s,
        "priority": priority,
        "command": command,
        "workload_key": workload_key,
        "environment": None if environment is None else dict(environment),
        "billing_mode": "spot" if prefer_spot else "on-demand",
        "allow_on_demand_fallback": prefer_spot and allow_on_demand_fallback,
        "checkpoint_interval_s": DEFAULT_CHECKPOINT_INTERVAL_S
        if prefer_spot and checkpoint_interval_s is None
        else checkpoint_interval_s,
        "pinned": pinned or None,  # sent only when asked: never moved to make room for other work
    }
    return {k: v for k, v in body.items() if v is not None}


def _takes_request_fields(method):
    """For a method that passes its `*fields, **named` on to _request_body: help() and inspect show
    _request_body's parameters in their place, before the method's own keyword-only ones."""
    own = inspect.signature(method)
    kept = [p for p in own.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    shared = inspect.signature(_request_body).parameters.values()
    method.__signature__ = own.replace(parameters=[kept[0], *shared, *kept[1:]])
    return method


class ResourceManager:
    """A client for one portal, acting as the user whose personal API token (gpp_…) it holds.

    `ResourceManager()` with no address or token finds them in GPU_PORTAL_URL / GPU_PORTAL_TOKEN,
    then in the file `gpu-portal login` writes (see gpu_portal_sdk.config); ConfigurationError says
    what is missing. `ResourceManager(url, token)` uses exactly those.

    `timeout` bounds each HTTP call in seconds; `max_retries` bounds the extra tries after a
    429, 5xx or connection failure (see gpu_portal_sdk.retry for which failures are retried).
    `sleep`, `random` and `clock` are there so tests can run without real waiting.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
        clock: Callable[[], float] = time.monotonic,
    ):
        credentials = resolve(url, token)
        self.url = credentials.url
        self.token = credentials.token  # also for the sessions' websockets (gpu_portal_sdk.sessions)
        self.api_url = credentials.url + "/api/v1/"
        self.timeout = timeout
        self.retry = RetryPolicy(max_retries, backoff_base_s, backoff_cap_s, sleep=sleep, random=random)
        self.clock = clock
        self.session = session or requests.Session()
        self.session.headers.update(
            {"Authorization": f"Bearer {credentials.token}", "User-Agent": f"gpu-portal-sdk/{__version__}"}
        )

    # Requests

    @_takes_request_fields
    def request_allocation(
        self, *fields, wait: bool = True, timeout_s: float | None = DEFAULT_WAIT_S, **named
    ) -> Resource:
        """Submit a request for GPU capacity; it starts pending and the scheduler places it.

        `min_gpu` is a share of one card: 0.5 asks for 500 milli-GPU. Above 1 it counts whole
        cards, rounded up (1.5 asks for two whole cards); then leave `num_gpus` at 1.
        `prefer_spot` bills at the cheaper, reclaimable spot rate, falls back to on-demand capacity
        when `allow_on_demand_fallback`, and declares a checkpoint every 15 minutes unless
        `checkpoint_interval_s` says otherwise (spot work must checkpoint).

        By default (`wait`) returns once the request is scheduled or running: its capacity is held.
        If it is not placed within `timeout_s` (60 s; None waits without limit) the SDK cancels the
        request it made, so nothing is left queued, and raises ResourceBusyError; the same cancel
        happens when the wait is interrupted (Ctrl-C). RequestFailedError if it ended otherwise.
        `wait=False` returns the request as submitted, usually pending.

        `environment` ({NAME: value}) are variables the job gets, besides those the node agent sets
        (GPU_PORTAL_*, CUDA_VISIBLE_DEVICES ...: those names are refused); they win over the team's
        secrets of the same name.
        """
        body = _request_body(*fields, **named)
        resource = Resource.from_api(self._call("POST", "requests/", json=body, keyed=True))
        if not wait:
            return resource
        try:
            return self.wait_until_running(resource.id, timeout_s=timeout_s)
        except ResourceBusyError as busy:
            raise self._withdrawn(busy) from None
        except RequestFailedError:
            raise  # it already ended: nothing to withdraw
        except BaseException:
            with suppress(PortalError):  # best effort: the portal may be what failed
                self.cancel(resource.id)
            raise

    @_takes_request_fields
    def estimate(self, *fields, **named) -> Estimate:
        """Where the same request_allocation(...) would run now, or why and until when it would wait.
        Checked like a submit (same errors); nothing is submitted."""
        body = _request_body(*fields, **named)
        return Estimate.from_api(self._call("POST", "requests/estimate/", json=body))

    def get(self, resource_id: int) -> Resource:
        """One request with its segments and event timeline; NotFoundError for another team's."""
        return Resource.from_api(self._call("GET", f"requests/{int(resource_id)}/"))

    def list(self, state: str | None = None, team: str | None = None, search: str | None = None):
        """Your teams' requests, newest first, following every page."""
        params = {k: v for k, v in {"state": state, "team": team, "search": search}.items() if v}
        resources = []
        while True:
            page = self._call("GET", "requests/", params=params)
            resources.extend(Resource.from_api(r) for r in page["results"])
            if not page.get("next"):
                return resources
            # Keep only the query of `next`: behind a proxy its host may not be the one we reach.
            params = {k: v[-1] for k, v in parse_qs(urlsplit(page["next"]).query).items()}

    def cancel(self, resource_id: int) -> Resource:
        """Withdraw a request in any live state; its slices are freed and it ends cancelled.
        AlreadyEndedError when it has already ended (its message names the state)."""
        return Resource.from_api(self._call("POST", f"requests/{int(resource_id)}/cancel/", keyed=True))

    def release(self, resource_id: int) -> Resource:
        """Done with the capacity: running work ends released (stopped by its user: neither succeeded
        nor failed), work not yet started cancelled. AlreadyEndedError when it has already ended."""
        return Resource.from_api(self._call("POST", f"requests/{int(resource_id)}/release/", keyed=True))

    def wait_until_running(self, resource_id: int, timeout_s: float | None = None, poll_s: float = 2.0):
        """Poll until the request is scheduled or running (both mean its capacity is held).

        ResourceBusyError when `timeout_s` passes first (the request stays queued: cancel it if
        you no longer want it); RequestFailedError when it ends failed, cancelled or preempted.
        """
        deadline = None if timeout_s is None else self.clock() + timeout_s
        while True:
            resource = self.get(resource_id)
            if resource.is_placed:
                return resource
            if resource.state != "pending":
                raise RequestFailedError(
                    f"Request {resource.id} is {resource.state}, not running.",
                    request_id=resource.id,
                    state=resource.state,
                )
            left = math.inf if deadline is None else deadline - self.clock()
            if left <= 0:
                reason = resource.pending_reason or "no capacity free"
                raise ResourceBusyError(
                    f"Request {resource.id} still pending after {timeout_s:g} s: {reason}",
                    request_id=resource.id,
                    code="busy",
                )
            self.retry.sleep(min(poll_s, left))

    def check_health(self, resource_id: int, max_heartbeat_age_s: float = 60.0) -> Health:
        """Whether the request is placed and, for each node it runs on, whether the node is ready and
        its agent sent a heartbeat within `max_heartbeat_age_s` (by the portal's clock, so local
        skew does not matter); `Health.reason` says what is wrong when it is not healthy."""
        response = self._send("GET", f"requests/{int(resource_id)}/")
        resource = Resource.from_api(response.json())
        now = _server_time(response)
        nodes = {}
        for allocation in resource.allocations:
            beat = allocation.node_last_heartbeat_at
            age = None if beat is None else max(0.0, (now - beat).total_seconds())
            nodes[allocation.node] = NodeHealth(
                name=allocation.node,
                status=allocation.node_status,
                last_heartbeat_at=beat,
                heartbeat_age_s=age,
                heartbeating=age is not None and age <= max_heartbeat_age_s,
            )
        return Health.judge(resource.id, resource.state, tuple(nodes.values()), max_heartbeat_age_s)

    def get_utilization(self, resource_id: int) -> Utilization:
        """How busy the request is now (`gpu_util`, `mem_util`: % over the cards it holds, the last minute)
        and each of its slices (finished ones too): its card's latest reading, the slice's own time (its
        last 15 minutes at most, never before it began) as at most 60 points, and util mean and std-dev.
        NotFoundError for another team's request."""
        return Utilization.from_api(self._call("GET", f"requests/{int(resource_id)}/utilization/"))

    def logs(self, resource_id: int, after: int = 0) -> LogTail:
        """The job's output from character offset `after` (0: all of it) as far as its node's agent has
        shipped it, with the request's state; NotFoundError for another team's request."""
        return LogTail.from_api(
            self._call("GET", f"requests/{int(resource_id)}/log/", params={"after": after})
        )

    def follow_logs(self, resource_id: int, poll_s: float = 2.0, after: int = 0) -> Iterator[str]:
        """The job's output as it comes, as `kubectl logs -f` follows a pod: what exists first, then each
        new piece, asking every `poll_s` seconds, until the request has ended and a read after that
        brings nothing new (its last output is in by then). Yields the pieces of text as they are."""
        while True:
            tail = self.logs(resource_id, after=after)
            after = tail.end
            if tail.text:
                yield tail.text
            elif tail.ended:
                return
            self.retry.sleep(poll_s)

    def teams(self) -> list[Team]:
        """The teams you belong to and your role in each (also a cheap check that the token works)."""
        return [Team.from_api(t) for t in _results(self._call("GET", "teams/"))]

    def prices(self) -> list[Price]:
        """The price in force of each priced pool, per whole card and hour in USD (Decimal).
        NotFoundError from an older portal that has no price catalog."""
        return [Price.from_api(p) for p in _results(self._call("GET", "prices/"))]

    def recommend(
        self,
        command: str = "",
        task_type: str = "training",
        deadline_s: int | None = None,
        budget_usd: Decimal | str | None = None,
        workload_key: str = "",
        gpu_model: str | None = None,
        pool: str | None = None,
        max_duration_s: int | None = None,
        team: str | None = None,
    ) -> Recommendation:
        """Which share and capacity type runs this workload (`workload_key`, default the command) at least
        cost within `deadline_s` and `budget_usd`, from its finished runs at other shares, its measured
        utilization or its task type's prior; with every option's predicted time and cost."""
        body = {"command": command, "task_type": task_type, "workload_key": workload_key}
        optional = {
            "deadline_s": deadline_s,
            "budget_usd": None if budget_usd is None else str(budget_usd),
            "gpu_model": gpu_model,
            "pool": pool,
            "max_duration_s": max_duration_s,
            "team": team,
        }
        body |= {k: v for k, v in optional.items() if v is not None}
        return Recommendation.from_api(self._call("POST", "requests/recommend/", json=body))

    def switch_billing(
        self, resource_id: int, billing_mode: str, checkpoint_interval_s: int | None = None
    ) -> str:
        """Bill a running request as "on-demand" or "spot" from now (spot needs a checkpoint interval:
        the request's own, or `checkpoint_interval_s`). Back to on-demand while on spot capacity also
        moves it to on-demand capacity at its next checkpoint. Returns the billing mode now in force."""
        body = {"billing_mode": billing_mode, "checkpoint_interval_s": checkpoint_interval_s}
        answer = self._call("POST", f"requests/{int(resource_id)}/billing-mode/", json=body, keyed=True)
        return answer["billing_mode"]

    def reclaim_node(self, node: str, grace_s: int | None = None, notice_id: str = "") -> dict:
        """Operators: reclaim spot node `node` (its name) as its cloud would: its jobs checkpoint and stop
        within `grace_s` seconds (default: the portal's), then are requeued. Returns the node."""
        found = _results(self._call("GET", "nodes/", params={"name": node}))
        if not found:
            raise NotFoundError(f"No node named {node!r}.", status=404, code="not_found")
        body = {"notice_id": notice_id, **({"grace_s": grace_s} if grace_s is not None else {})}
        return self._call("POST", f"nodes/{found[0]['id']}/reclaim/", json=body, keyed=True)

    def statement(self, team: str, month: str | None = None, user: str | None = None) -> Statement:
        """A team's monthly statement (month "YYYY-MM", default this month; `user`: one member's)."""
        params = {k: v for k, v in {"month": month, "user": user}.items() if v}
        return Statement.from_api(self._call("GET", f"teams/{team}/statement/", params=params))

    # HTTP

    def quote(
        self,
        gpu_model: str,
        min_gpu: float = 1.0,
        num_gpus: int = 1,
        max_duration_s: int | None = None,
        checkpoint_interval_s: int | None = None,
        restart_overhead_s: int | None = None,
    ) -> Quote:
        """On-demand against spot for this shape on gpu_model: per hour, over max_duration_s, and spot's
        effective cost once the pool's expected reclaims are counted (each loses half the checkpoint
        interval plus the restart overhead). Money is Decimal. `min_gpu` and `num_gpus` mean what they
        mean to request_allocation: above 1, `min_gpu` counts whole cards."""
        gpu_milli, num_gpus = _shape(min_gpu, num_gpus)
        params = {
            "gpu_model": gpu_model,
            "gpu_milli": gpu_milli,
            "num_gpus": num_gpus,
            "max_duration_s": max_duration_s,
            "checkpoint_interval_s": checkpoint_interval_s,
            "restart_overhead_s": restart_overhead_s,
        }
        query = {k: v for k, v in params.items() if v is not None}
        return Quote.from_api(self._call("GET", "prices/quote/", params=query))

    def _withdrawn(self, busy: ResourceBusyError) -> ResourceBusyError:
        """The busy error after cancelling the request that request_allocation(wait=True) made."""
        try:
            self.cancel(busy.request_id)
        except PortalError as error:
            return ResourceBusyError(
                f"{busy.message}; cancelling it failed, it may still be queued: {error.message}",
                request_id=busy.request_id,
                code=busy.code,
            )
        return ResourceBusyError(
            f"{busy.message}; the request was cancelled.",
            request_id=busy.request_id,
            cancelled=True,
            code=busy.code,
        )

    def _call(self, method: str, path: str, **kwargs):
        response = self._send(method, path, **kwargs)
        return response.json() if response.content else None

    def _send(self, method: str, path: str, keyed: bool = False, **kwargs) -> requests.Response:
        """One API call: retried per RetryPolicy, a typed PortalError for anything but 2xx.

        `keyed`: a write the portal takes an Idempotency-Key for. One key is made for the call and sent
        with each of its tries, so a retry after a lost answer is answered, not done again."""
        url = self.api_url + path
        if keyed:
            kwargs["headers"] = {IDEMPOTENCY_KEY_HEADER: str(uuid.uuid4())}
        attempt = 0
        while True:
            may_retry = attempt < self.retry.max_retries
            try:
                response = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except requests.RequestException as error:
                if not (may_retry and self.retry.retries_error(method, error, keyed)):
                    raise ConnectionFailedError(
                        f"{method} {url}: no answer from the portal ({error})", code="connection_failed"
                    ) from error
                delay = self.retry.delay(attempt)
            else:
                if response.ok:
                    return response
                if not (may_retry and self.retry.retries_status(method, response.status_code, keyed)):
                    raise _error(response)
                retry_after = parse_retry_after(response.headers.get("Retry-After"), _server_time(response))
                delay = self.retry.delay(attempt, retry_after)
            self.retry.sleep(delay)
            attempt += 1


def _error(response: requests.Response) -> PortalError:
    try:
        body = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        body = {"code": f"http_{response.status_code}", "message": response.reason or "no message"}
    code = body.get("code", "error")
    cls = error_for_status(response.status_code, code)
    kwargs = {
        "status": response.status_code,
        "code": code,
        "fields": body.get("fields") or {},
    }
    if cls is RateLimitedError:
        kwargs["retry_after"] = parse_retry_after(response.headers.get("Retry-After"), _server_time(response))
    return cls(body.get("message") or response.reason, **kwargs)


def _shape(min_gpu: float, num_gpus: int) -> tuple[int, int]:
    """(gpu_milli, num_gpus) for a `min_gpu` share: at most 1 is a share of each card, above 1 whole cards
    rounded up (then `num_gpus` must stay 1). Every call that takes min_gpu reads it here."""
    if not min_gpu * MILLI_PER_GPU >= 1:  # also refuses NaN
        raise _invalid("min_gpu", "must be more than 0 (a share of a card, at least 0.001)")
    if min_gpu > 1:
        if num_gpus != 1:
            raise _invalid("min_gpu", "above 1 counts whole cards: give it or the number of GPUs, not both")
        return MILLI_PER_GPU, math.ceil(min_gpu)
    return round(min_gpu * MILLI_PER_GPU), num_gpus


def _invalid(field: str, problem: str) -> ValidationError:
    """A ValidationError found before sending, shaped as the portal's: `fields` says what is wrong with the
    field in words that do not name it (a caller, such as the CLI, names it in its own terms)."""
    return ValidationError(
        f"{field}: {problem}.",
        code="validation_error",
        fields={field: [f"{problem}."]},
    )


def _results(data):
    """A list endpoint's items, whether the portal pages it or not."""
    return data["results"] if isinstance(data, dict) else data


def _server_time(response: requests.Response) -> dt.datetime:
    """The portal's clock from the Date header (the local one when absent)."""
    date = response.headers.get("Date")
    return email.utils.parsedate_to_datetime(date) if date else dt.datetime.now(dt.UTC)
