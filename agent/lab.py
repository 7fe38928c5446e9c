"""JupyterLab in an allocation, reached only through the portal.

The agent starts one Jupyter server per running interactive request on the first "lab" session
stream, exactly as a session is started (the job's identity, environment, cards, namespaces; its own
cgroup inside the job's), and stops it with the job. It listens on a Unix socket in the job's private
work directory (0600, the job's own; no TCP port on the node) and wants a random token that never
leaves the agent: the agent adds it to each request it passes on, so the portal never holds it.

Each stream is one session websocket (agent.sessions) carrying one exchange:
- HTTP: the portal sends `{"type": "request", "method", "path", "headers"}`, the body as binary
  frames, then `{"type": "eof"}`; the agent sends the request as HTTP/1.0 (one response, no chunking,
  its end the connection's) and relays the response's raw bytes back until Jupyter closes;
- a websocket (kernels, terminals, events): the agent opens it to Jupyter with the browser's offered
  subprotocols, answers `{"type": "open", "subprotocol"}`, then relays messages both ways as binary
  frames whose first byte says what the message was: `t` text, `b` binary.
"""

import asyncio
import collections
import contextlib
import json
import logging
import os
import secrets

from websockets.asyncio.client import unix_connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from agent.isolation import JobStartError

log = logging.getLogger(__name__)

SOCKET_NAME = ".jupyter-lab.sock"
START_TIMEOUT_S = 90.0
READ_BYTES = 64 * 1024
MAX_SOCKET_PATH = 107  # sun_path
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "host", "authorization",
              "te", "trailer", "proxy-authorization", "origin"}  # fmt: skip
TEXT, BINARY = b"t", b"b"


def base_url(request_id: int) -> str:
    return f"/requests/{request_id}/lab/"


class LabServer:
    """One request's Jupyter server: its process, socket and token."""

    def __init__(self, job, python: str):
        self.job = job
        self.python = python
        self.socket = str(job.sandbox.workdir / SOCKET_NAME)
        self.token = secrets.token_urlsafe(32)
        self.process: asyncio.subprocess.Process | None = None
        self.cgroup = None
        self.output: collections.deque[str] = collections.deque(maxlen=20)

    async def start(self) -> None:
        if len(self.socket) > MAX_SOCKET_PATH:
            raise JobStartError(f"the work directory's path is too long for a Unix socket: {self.socket}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        job = self.job
        self.cgroup = job.sandbox.inner_cgroup("lab")
        command = [
            self.python, "-m", "jupyterlab", "--no-browser",
            f"--sock={self.socket}", "--sock-mode=0600",
            f"--ServerApp.base_url={base_url(job.request_id)}",
            f"--ServerApp.root_dir={job.sandbox.workdir}",
            # No news feed or update check fetched from the internet: a node need not reach it.
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]  # fmt: skip
        if job.sandbox.identity is None and os.geteuid() == 0:
            command.append("--allow-root")  # an unisolated agent as root runs its jobs as root already
        # The token in the environment, not the arguments: no other user of the node reads it in `ps`.
        environment = {**job.environment, "JUPYTER_TOKEN": self.token}
        self.process = await asyncio.create_subprocess_exec(
            *job.sandbox.argv(command, self.cgroup),
            cwd=job.sandbox.workdir,
            env=environment,
            start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._drainer = asyncio.create_task(self._drain())
        await self._until_ready()

    async def _drain(self) -> None:
        while line := await self.process.stderr.readline():
            self.output.append(line.decode(errors="replace").rstrip())

    async def _until_ready(self) -> None:
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        while asyncio.get_running_loop().time() < deadline:
            if self.process.returncode is not None:
                break
            with contextlib.suppress(OSError):
                status, _ = await self.request("GET", f"{base_url(self.job.request_id)}api/status")
                if status == 200:
                    return
            await asyncio.sleep(0.2)
        self.stop()
        raise JobStartError("JupyterLab did not start: " + " | ".join(self.output))

    async def request(self, method: str, path: str) -> tuple[int, bytes]:
        """A small request of the agent's own (readiness)."""
        reader, writer = await asyncio.open_unix_connection(self.socket)
        try:
            writer.write(self.head(method, path, []) + b"\r\n")
            answer = await reader.read()
        finally:
            writer.close()
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
        return status, answer

    def head(self, method: str, path: str, headers: list) -> bytes:
        lines = [f"{method} {path} HTTP/1.0", "Host: localhost", f"Authorization: token {self.token}"]
        lines += [f"{name}: {value}" for name, value in headers if name.lower() not in HOP_BY_HOP]
        return "\r\n".join(lines).encode("latin1") + b"\r\n"

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def stop(self) -> None:
        """Jupyter and all it started (kernels, terminals) end: the whole cgroup, else its group."""
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, 9)


async def relay_http(ws, server: LabServer, first: dict) -> None:
    """One HTTP exchange: the request's head from the session's spec, its body from the portal's
    frames, the response's bytes back."""
    body = bytearray()
    async for frame in ws:
        if isinstance(frame, bytes):
            body += frame
        elif json.loads(frame).get("type") == "eof":
            break
    headers = [(n, v) for n, v in first.get("headers", []) if n.lower() != "content-length"]
    if body or first["method"] not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        headers.append(("Content-Length", str(len(body))))
    reader, writer = await asyncio.open_unix_connection(server.socket)
    try:
        writer.write(server.head(first["method"], first["path"], headers) + b"\r\n" + bytes(body))
        await writer.drain()
        while data := await reader.read(READ_BYTES):
            await ws.send(data)
    finally:
        writer.close()


async def relay_websocket(ws, server: LabServer, first: dict) -> None:
    """One websocket to Jupyter, its messages relayed both ways until either side closes."""
    try:
        upstream = await unix_connect(
            server.socket,
            uri=f"ws://localhost{first['path']}",
            additional_headers={"Authorization": f"token {server.token}"},
            subprotocols=first.get("subprotocols") or None,
            max_size=None,
            compression=None,
        )
    except (OSError, WebSocketException) as error:
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": "error", "message": f"JupyterLab refused: {error}"}))
        return
    await ws.send(json.dumps({"type": "open", "subprotocol": upstream.subprotocol}))

    async def down():
        async for message in upstream:
            await ws.send(TEXT + message.encode() if isinstance(message, str) else BINARY + message)

    async def up():
        async for frame in ws:
            if isinstance(frame, bytes) and frame[:1] == TEXT:
                await upstream.send(frame[1:].decode())
            elif isinstance(frame, bytes):
                await upstream.send(frame[1:])

    tasks = [asyncio.create_task(down()), asyncio.create_task(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await upstream.close()
