"""Interactive sessions in the node's allocations, reached only through the portal.

The agent keeps one websocket open from the node out to the portal (`ws/agent/sessions/`, with the
node's credential): nodes behind NAT reach the portal as they do for their work list, and no port on
the node is opened to anyone. When a user opens a session, the portal says so there and the agent
connects a websocket for that session (`ws/agent/sessions/<key>/`), over which it relays:

- a terminal or a command: a process started as the request's job is (agent.jobs: its identity,
  cgroup, namespaces, environment and cards, plus TERM), on a pseudo-terminal (resized by the
  user's `resize` frames) or, for a command without a terminal, on pipes (stdout and stderr
  together; the user's `eof` closes its stdin); its exit status ends the session. Isolated, it runs
  in a cgroup of its own inside the job's, killed whole when the session ends however it ends (the
  process exits, the user goes, the job or the agent stops): nothing it started outlives it;
- a port: a TCP connection to a port a process of the allocation listens on, on loopback;
- JupyterLab: one HTTP exchange or one websocket with the request's Jupyter server (agent.lab),
  started on the first and stopped with the job. Its websockets are `ws/agent/sessions/<key>/<stream>/`:
  one lab session carries many streams.
"""

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading

import psutil
from gpu_portal_sdk.sessions import open_websocket
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from agent import lab
from agent.isolation import JobStartError

log = logging.getLogger(__name__)

SETSID = shutil.which("setsid") or "/usr/bin/setsid"
SHELLS = ("/bin/bash", "/bin/sh")
READ_BYTES = 64 * 1024
RECONNECT_S = (0.5, 30.0)  # the control websocket's first and longest wait before connecting again
LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1"}


class SessionTunnel:
    """The agent's side of the portal's session relay, on an event loop in a thread of its own.
    `job_of(request_id)`: the agent's running Job for a request, or None; `lab_python`: the Python
    JupyterLab runs on (the agent's own by default)."""

    def __init__(self, url: str, credential: str, job_of, lab_python: str | None = None):
        self.url = url
        self.credential = credential
        self.job_of = job_of
        self.lab_python = lab_python or sys.executable
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connected = threading.Event()  # the control websocket is open (tests wait on it)
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.session_pids: dict[int, set[int]] = {}  # request -> its sessions' process leaders
        self._tasks: set[asyncio.Task] = set()  # the sessions running (held: the loop keeps weak refs)
        self.labs: dict[int, tuple[object, asyncio.Task]] = {}  # request -> (its job, its Lab's start)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="sessions", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.loop is not None and self._stopping is not None:
            self.loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _main(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()
        try:
            self.loop.run_until_complete(self._run())
        finally:
            self.loop.close()

    async def _run(self) -> None:
        wait = RECONNECT_S[0]
        stopping = asyncio.create_task(self._stopping.wait())
        while not self._stopping.is_set():
            try:
                async with open_websocket(self.url, self.credential, "ws/agent/sessions/") as ws:
                    self.connected.set()
                    wait = RECONNECT_S[0]
                    listening = asyncio.create_task(self._listen(ws))
                    await asyncio.wait([listening, stopping], return_when=asyncio.FIRST_COMPLETED)
                    listening.cancel()
            except (OSError, WebSocketException) as error:
                log.warning("sessions: cannot reach the portal's relay: %s", error)
            self.connected.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(stopping), wait)
            wait = min(wait * 2, RECONNECT_S[1])
        # The agent stops: its sessions end, and what they started with them.
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _listen(self, ws) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                self._spawn(self._session(json.loads(message)))

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _session(self, spec: dict) -> None:
        path = f"ws/agent/sessions/{spec['session']}/" + (f"{spec['stream']}/" if spec.get("stream") else "")
        try:
            async with open_websocket(self.url, self.credential, path) as ws:
                job = self.job_of(spec["request_id"])
                if job is None:
                    await _error(ws, "The request runs nothing on this node now.")
                elif spec["kind"] == "port-forward":
                    await self._forward(ws, job, spec["port"])
                elif spec["kind"] == "lab":
                    await self._lab(ws, job, spec["lab"])
                else:
                    await self._process(ws, job, spec)
        except (OSError, WebSocketException, InvalidStatus) as error:
            log.warning("session %s: %s", spec.get("session"), error)
        except Exception:
            log.exception("session %s failed", spec.get("session"))

    # A terminal or a command

    async def _process(self, ws, job, spec: dict) -> None:
        command = list(spec.get("command") or [])
        tty = bool(spec.get("tty"))
        if not command:
            command = [next((s for s in SHELLS if os.path.exists(s)), "/bin/sh"), "-l"]
        environment = {**job.environment, "TERM": "xterm-256color"}
        # On a terminal the process takes it as its controlling terminal inside its own session (after
        # the sandbox's own setsid), so a resize reaches it as SIGWINCH and a hang-up as SIGHUP.
        # Isolated, the session runs in a cgroup of its own inside the job's: when it ends, all it
        # started ends with it, however it forked (a background job, setsid, a daemon).
        try:
            cgroup = job.sandbox.inner_cgroup(f"session-{spec['session']}")
        except JobStartError as error:
            await _error(ws, f"Cannot start the session: {error}")
            return
        argv = job.sandbox.argv([SETSID, "-w", "-c", *command] if tty else command, cgroup)
        options = {"cwd": job.sandbox.workdir, "env": environment, "start_new_session": True, "umask": 0o077}
        try:
            if tty:
                session = await _TerminalProcess.start(argv, spec, options)
            else:
                session = await _PipeProcess.start(argv, options)
        except OSError as error:
            await _error(ws, f"Cannot start {command[0]}: {error}")
            await _remove(cgroup)
            return
        pids = self.session_pids.setdefault(job.request_id, set())
        pids.add(session.pid)
        try:
            status = await self._relay_process(ws, job, session)
        finally:
            pids.discard(session.pid)
            if cgroup is not None:
                cgroup.kill()
            session.end()
            await _remove(cgroup)
        if status is not None:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(json.dumps({"type": "exit", "status": job.sandbox.exit_code(status)}))

    async def _relay_process(self, ws, job, session) -> int | None:
        """Until the process exits (its status) or the user's side goes, or the job ends (None)."""

        async def output():
            while data := await session.read():
                await ws.send(data)

        async def user():
            with contextlib.suppress(ConnectionClosed):
                async for frame in ws:
                    if isinstance(frame, bytes):
                        await session.write(frame)
                        continue
                    message = json.loads(frame)
                    if message.get("type") == "resize":
                        session.resize(message["cols"], message["rows"])
                    elif message.get("type") == "eof":
                        session.close_input()

        async def job_ended():
            while self.job_of(job.request_id) is job:
                await asyncio.sleep(1.0)

        reading = asyncio.create_task(output())
        tasks = {
            asyncio.create_task(session.wait()): "exit",
            asyncio.create_task(user()): "user",
            asyncio.create_task(job_ended()): "job",
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            exited = next((task for task in done if tasks[task] == "exit"), None)
            if exited is None:
                return None
            # What the process wrote before it exited still goes out (a little while: something it
            # left in the background may hold the terminal open).
            with contextlib.suppress(asyncio.TimeoutError, ConnectionClosed):
                await asyncio.wait_for(asyncio.shield(reading), 0.5)
            return exited.result()
        finally:
            for task in (*tasks, reading):
                task.cancel()
            await asyncio.gather(*tasks, reading, return_exceptions=True)

    # JupyterLab

    async def _lab(self, ws, job, exchange: dict) -> None:
        try:
            server = await self._lab_server(job)
        except (JobStartError, OSError) as error:
            await _error(ws, f"Cannot start JupyterLab: {error}")
            return
        relay = lab.relay_websocket if exchange["mode"] == "websocket" else lab.relay_http
        with contextlib.suppress(ConnectionClosed, ConnectionError):
            await relay(ws, server, exchange)

    async def _lab_server(self, job) -> "lab.LabServer":
        """The request's Jupyter server, started on the first stream (the others wait for it)."""
        known = self.labs.get(job.request_id)
        if known is None or known[0] is not job or (known[1].done() and known[1].exception()):
            known = (job, self._spawn(self._run_lab(job)))
            self.labs[job.request_id] = known
        return await asyncio.shield(known[1])

    async def _run_lab(self, job) -> "lab.LabServer":
        server = lab.LabServer(job, self.lab_python)
        try:
            await server.start()
        except BaseException:
            server.stop()
            raise
        self._spawn(self._keep_lab(job, server))
        return server

    async def _keep_lab(self, job, server) -> None:
        """Until the job ends (or the agent stops): then Jupyter and its kernels end too."""
        try:
            while self.job_of(job.request_id) is job and server.alive():
                await asyncio.sleep(1.0)
        finally:
            server.stop()
            if self.labs.get(job.request_id, (None,))[0] is job:
                del self.labs[job.request_id]
            if server.process is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(server.process.wait(), 5)
            await _remove(server.cgroup)

    # A port

    async def _forward(self, ws, job, port: int) -> None:
        address = self._listener(job, port)
        if address is None:
            await _error(ws, f"Nothing in this allocation listens on port {port}.")
            return
        try:
            reader, writer = await asyncio.open_connection(address, port)
        except OSError as error:
            await _error(ws, f"Cannot connect to port {port}: {error}")
            return

        async def downstream():
            while data := await reader.read(READ_BYTES):
                await ws.send(data)

        async def upstream():
            with contextlib.suppress(ConnectionClosed):
                async for frame in ws:
                    if isinstance(frame, bytes):
                        writer.write(frame)
                        await writer.drain()
                    elif json.loads(frame).get("type") == "eof" and writer.can_write_eof():
                        writer.write_eof()

        tasks = [asyncio.create_task(downstream()), asyncio.create_task(upstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            writer.close()

    def _listener(self, job, port: int) -> str | None:
        """The loopback address of a socket listening on `port` that a process of the job (or of one of
        its sessions) holds: never another allocation's or the node's own service."""
        own = set(job.pids())
        for leader in self.session_pids.get(job.request_id, ()):
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(leader)
                own |= {leader, *(child.pid for child in process.children(recursive=True))}
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid in own:
                return LOOPBACK.get(conn.laddr.ip, conn.laddr.ip)
        return None


async def _error(ws, message: str) -> None:
    with contextlib.suppress(ConnectionClosed):
        await ws.send(json.dumps({"type": "error", "message": message}))


def _kill_tree(pid: int) -> None:
    """Unisolated: SIGKILL the session's process group and whatever descends from its leader (what
    left the group and was already orphaned is out of reach: isolated, the cgroup reaches it)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for process in descendants:
        with contextlib.suppress(psutil.Error):
            process.kill()


async def _remove(cgroup, timeout_s: float = 5.0) -> None:
    """Remove a session's cgroup once the processes killed in it are gone."""
    if cgroup is None:
        return
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cgroup.remove():
        if asyncio.get_running_loop().time() > deadline:
            log.warning("session cgroup %s: processes left after SIGKILL", cgroup.main)
            return
        cgroup.kill()
        await asyncio.sleep(0.02)


class _TerminalProcess:
    """A process on a pseudo-terminal of the given size."""

    @classmethod
    async def start(cls, argv, spec, options):
        master, slave = pty.openpty()
        try:
            _set_size(master, spec.get("cols") or 80, spec.get("rows") or 24)
            process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, **options)
        except OSError:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return cls(process, master)

    def __init__(self, process, master: int):
        self.process = process
        self.pid = process.pid
        self.master = master
        self.loop = asyncio.get_running_loop()
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()
        os.set_blocking(master, False)
        self.loop.add_reader(master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.master, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:  # EIO: every process holding the terminal has closed it
            data = b""
        if not data:
            self.loop.remove_reader(self.master)
        self.chunks.put_nowait(data)

    async def read(self) -> bytes:
        return await self.chunks.get()

    async def write(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.master, data) :]
            except BlockingIOError:
                await asyncio.sleep(0.005)

    def resize(self, cols: int, rows: int) -> None:
        _set_size(self.master, cols, rows)

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.master, b"\x04")  # Ctrl-D: end of input on a terminal

    async def wait(self) -> int:
        return await self.loop.run_in_executor(None, self.process.wait)

    def end(self) -> None:
        """The terminal hangs up (SIGHUP to what runs on it); anything left of the session is killed."""
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.master)
        with contextlib.suppress(OSError):
            os.close(self.master)
        if self.process.poll() is None:
            _kill_tree(self.pid)
            self.process.wait()


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class _PipeProcess:
    """A command on pipes: its input from the user, its stdout and stderr together to the user."""

    @classmethod
    async def start(cls, argv, options):
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **options,
        )
        return cls(process)

    def __init__(self, process):
        self.process = process
        self.pid = process.pid

    async def read(self) -> bytes:
        return await self.process.stdout.read(READ_BYTES)

    async def write(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionError):
            self.process.stdin.write(data)
            await self.process.stdin.drain()

    def resize(self, cols: int, rows: int) -> None:
        pass  # no terminal

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    async def wait(self) -> int:
        return await self.process.wait()

    def end(self) -> None:
        if self.process.returncode is None:
            _kill_tree(self.pid)
