"""NodeClient: the node agent's side of the portal (/api/v1/agent/…), with a node credential (node_…).

The same HTTP layer as ResourceManager: one session, the same retry rule (gpu_portal_sdk.retry) and
the same typed errors. Every report is idempotent on the portal, so the agent may simply send it
again on its next round after a failure.
"""

import datetime as dt
from collections.abc import Sequence

from gpu_portal_sdk.client import ResourceManager


class NodeClient:
    """Acts for the one node whose agent credential it holds; sees and reports only that node's work."""

    def __init__(self, url: str, credential: str, *, timeout: float = 10.0, max_retries: int = 2, **http):
        # ResourceManager is the HTTP layer here: the node credential is a bearer secret like a token.
        self._http = ResourceManager(url, credential, timeout=timeout, max_retries=max_retries, **http)
        self.api_url = self._http.api_url
        self.url, self.credential = self._http.url, self._http.token  # for the sessions' websockets

    def register(self, gpus: Sequence[dict], isolation: dict | None = None) -> dict:
        """Register or reconcile the node's cards: [{uuid, model, memory_mib, mig_mode}]. `isolation`:
        how the agent runs jobs, {mode: "isolated"|"unisolated", namespaces: bool, cgroup: "v2"|"v1"|"none"};
        not sent when None (the portal then shows the node's isolation as unknown). The answer's `cards`
        names each reported card as the portal knows it (on a Slurm node, Slurm's card of its index)."""
        body = {"gpus": list(gpus), **({"isolation": dict(isolation)} if isolation is not None else {})}
        return self._post("agent/register/", body)

    def heartbeat(self) -> dict:
        return self._post("agent/heartbeat/")

    def work(self) -> list[dict]:
        """The requests this node must run now, each with its command, cards and checkpoint dir."""
        return self._http._call("GET", "agent/work/")

    # `generation`: the run's, from the work list; the portal ignores a report of an earlier run.

    def started(
        self, request_id: int, generation: int | None = None, resumed_from: dt.datetime | None = None
    ) -> dict:
        """The job's process started; `resumed_from` (aware): the checkpoint it found, if any."""
        body = {"generation": generation, "resumed_from": resumed_from.isoformat() if resumed_from else None}
        return self._post(f"agent/requests/{int(request_id)}/started/", body)

    def finished(
        self,
        request_id: int,
        exit_code: int,
        generation: int | None = None,
        stopped_at: dt.datetime | None = None,
        host_memory_exceeded_mib: int | None = None,
    ) -> dict:
        """The job's process ended with `exit_code`; `stopped_at` (aware): when, if the agent knows.
        `host_memory_exceeded_mib`: its cgroup's memory limit (MiB) killed it, so the request fails
        saying so; not sent when None."""
        body = {
            "exit_code": exit_code,
            "generation": generation,
            "stopped_at": stopped_at.isoformat() if stopped_at else None,
        }
        if host_memory_exceeded_mib is not None:
            body["host_memory_exceeded_mib"] = host_memory_exceeded_mib
        return self._post(f"agent/requests/{int(request_id)}/finished/", body)

    def checkpointed(
        self, request_id: int, at: dt.datetime, ref: str = "", generation: int | None = None
    ) -> dict:
        """The job checkpointed at `at` (aware); `ref`: where its data is (default: its checkpoint dir)."""
        body = {"at": at.isoformat(), "generation": generation, **({"ref": ref} if ref else {})}
        return self._post(f"agent/requests/{int(request_id)}/checkpointed/", body)

    def reclaim_notice(self, deadline: dt.datetime, source: str, notice_id: str = "") -> dict:
        """The cloud provider takes this node back at `deadline` (aware): its work checkpoints and moves."""
        body = {"deadline": deadline.isoformat(), "source": source, "notice_id": notice_id}
        return self._post("agent/reclaim-notice/", body)

    def log(self, request_id: int, offset: int, text: str) -> dict:
        return self._post(f"agent/requests/{int(request_id)}/log/", {"offset": offset, "text": text})

    def memory_exceeded(self, request_id: int, *, uuid: str, used_mib: int, limit_mib: int) -> dict:
        body = {"uuid": uuid, "used_mib": used_mib, "limit_mib": limit_mib}
        return self._post(f"agent/requests/{int(request_id)}/memory-exceeded/", body)

    def samples(self, sampled_at: dt.datetime, readings: Sequence[dict]) -> dict:
        """One batch of card readings taken at `sampled_at` (aware UTC); also a heartbeat."""
        return self._post("agent/samples/", {"sampled_at": sampled_at.isoformat(), "gpus": list(readings)})

    def sample_moments(self, moments: Sequence[tuple[dt.datetime, Sequence[dict]]]) -> dict:
        """Several moments' card readings in one request, [(sampled_at, readings)], at most 60; also a
        heartbeat. Cheaper for the portal than a request per moment."""
        body = {
            "moments": [{"sampled_at": at.isoformat(), "gpus": list(readings)} for at, readings in moments]
        }
        return self._post("agent/samples/", body)

    def usage(self, sampled_at: dt.datetime, host: dict, slices: Sequence[dict]) -> dict:
        """The host's CPU and network ({cpu_percent, net_rx_bytes_per_s, net_tx_bytes_per_s}) and each
        job's own use of its cards ([{request_id, uuid, memory_used_mib, sm_util_percent}])."""
        body = {"sampled_at": sampled_at.isoformat(), "host": host, "slices": list(slices)}
        return self._post("agent/usage/", body)

    def _post(self, path: str, body: dict | None = None):
        return self._http._call("POST", path, json=body if body is not None else {})
