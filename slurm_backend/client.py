"""A small slurmrestd client (the controller's API, v0.0.38): nodes, jobs, submit, signal.

Over a Unix socket (`unix:/path/to.sock`, rest_auth/local: Slurm takes the portal's own uid) or over
HTTP(S) with a JWT (auth/jwt: `X-SLURM-USER-TOKEN`; with `as_user`, `X-SLURM-USER-NAME`, which a token
of SlurmUser may set to act as that user). The standard library's http.client does both, so the
portal needs no other package for it.
"""

import http.client
import json
import socket
from urllib.parse import quote, urlsplit

API = "/slurm/v0.0.38"
TIMEOUT_S = 10.0


class SlurmUnavailable(Exception):
    """slurmrestd could not be reached or did not answer in JSON: the message says which and where."""


class SlurmError(Exception):
    """slurmrestd answered with errors (a refused submission, an unknown job): their descriptions."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def check_url(url: str) -> None:
    """ValueError unless `url` is `unix:/absolute/path` or `http(s)://host[:port]`."""
    if url.startswith("unix:"):
        if not url[len("unix:") :].startswith("/"):
            raise ValueError("Give the socket as unix:/absolute/path.")
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Give slurmrestd as http(s)://host:port or unix:/path/to.sock.")


class SlurmClient:
    """slurmrestd at `url`; `token`: the JWT for http(s) (ignored on a Unix socket)."""

    def __init__(self, url: str, token: str = "", timeout_s: float = TIMEOUT_S):
        check_url(url)
        self.url, self.token, self.timeout_s = url, token, timeout_s

    def _connection(self) -> http.client.HTTPConnection:
        if self.url.startswith("unix:"):
            return _UnixConnection(self.url[len("unix:") :], self.timeout_s)
        parts = urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return kind(parts.hostname, parts.port, timeout=self.timeout_s)

    def call(self, method: str, path: str, body: dict | None = None, as_user: str = "") -> dict:
        """One call; the answer's JSON. SlurmUnavailable when it cannot be had, SlurmError when Slurm
        lists errors in it."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token and not self.url.startswith("unix:"):
            headers["X-SLURM-USER-TOKEN"] = self.token
            if as_user:
                headers["X-SLURM-USER-NAME"] = as_user
        prefix = urlsplit(self.url).path.rstrip("/") if not self.url.startswith("unix:") else ""
        connection = self._connection()
        try:
            connection.request(
                method,
                prefix + API + path,
                body=json.dumps(body) if body is not None else None,
                headers=headers,
            )
            response = connection.getresponse()
            raw = response.read()
        except OSError as error:  # refused, no socket, timed out, TLS
            raise SlurmUnavailable(f"slurmrestd at {self.url} cannot be reached: {error}") from None
        finally:
            connection.close()
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            raise SlurmUnavailable(
                f"slurmrestd at {self.url} answered {response.status} without JSON: {raw[:200]!r}"
            ) from None
        if errors := [e for e in answer.get("errors") or [] if e.get("error_number") or e.get("error_code")]:
            words = "; ".join(e.get("description") or e.get("error") or str(e) for e in errors)
            raise SlurmError(f"slurmrestd: {words}")
        if response.status >= 400:
            raise SlurmError(f"slurmrestd answered {response.status} to {method} {path}")
        return answer

    def nodes(self) -> list[dict]:
        return self.call("GET", "/nodes")["nodes"]

    def jobs(self) -> list[dict]:
        return self.call("GET", "/jobs")["jobs"]

    def job(self, job_id: int) -> dict:
        """One job, as `jobs` lists it; SlurmError when Slurm does not know it."""
        return self.call("GET", f"/job/{quote(str(job_id))}")["jobs"][0]

    def submit(self, job: dict, script: str, as_user: str = "") -> int:
        """Submit a batch job; its id."""
        return int(
            self.call("POST", "/job/submit", {"job": job, "script": script}, as_user=as_user)["job_id"]
        )

    def signal(self, job_id: int, signal_name: str) -> None:
        """scancel --signal: KILL cancels the job; TERM asks it to stop (a pending job is cancelled)."""
        self.call("DELETE", f"/job/{quote(str(job_id))}?signal={quote(signal_name)}")
