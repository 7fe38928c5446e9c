"""Interactive sessions through the portal's websockets: `gpu-portal shell` (a terminal or a command in
the allocation, like `kubectl exec`) and `gpu-portal port-forward`. Binary frames carry the bytes, JSON
text frames the control: resize, eof, exit, error."""

import asyncio
import contextlib
import json
import os
import signal
import sys
from urllib.parse import urlsplit

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gpu_portal_sdk import errors

SESSION_ENDED = 255  # the session ended without an exit status (closed by the portal, revoked)
READ_BYTES = 64 * 1024


def websocket_url(url: str, path: str) -> str:
    """The portal's websocket address for `path` ("ws/…/"): ws:// for http://, wss:// for https://."""
    parts = urlsplit(url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/{path.lstrip('/')}"


def open_websocket(url: str, token: str, path: str, **options):
    """A websocket to the portal with the bearer token; the portal checks Origin as a browser's, so it
    is sent as the portal's own."""
    parts = urlsplit(url)
    return connect(
        websocket_url(url, path),
        additional_headers={"Authorization": f"Bearer {token}"},
        origin=f"{parts.scheme}://{parts.netloc}",
        max_size=None,
        **options,
    )


def refused(error: InvalidStatus) -> errors.PortalError:
    status = error.response.status_code
    if status == 403:
        return errors.PermissionDeniedError(
            "Refused: only the request's team and operators open sessions, on a running interactive "
            "request (one with no command), with a valid token.",
            status=403,
        )
    return errors.PortalError(f"The portal refused the session (HTTP {status}).", status=status)


async def shell(url: str, token: str, request_id: int, command: list[str], *, tty: bool) -> int:
    """Run `command` (a login shell when empty) in the allocation with this process's stdin and stdout;
    returns its exit status (a signal N as 128 + N)."""
    try:
        async with open_websocket(url, token, f"ws/requests/{int(request_id)}/session/") as ws:
            return await _shell(ws, command, tty)
    except InvalidStatus as error:
        raise refused(error) from None


async def _shell(ws, command: list[str], tty: bool) -> int:
    loop = asyncio.get_running_loop()
    size = os.get_terminal_size(sys.stdout.fileno()) if tty else os.terminal_size((80, 24))
    await ws.send(json.dumps({"type": "open", "kind": "shell", "command": command, "tty": tty,
                              "cols": size.columns, "rows": size.lines}))  # fmt: skip
    stdin = sys.stdin.fileno()
    saved = None
    if tty:
        import termios
        import tty as tty_mode

        saved = termios.tcgetattr(stdin)
        tty_mode.setraw(stdin)

        resizes: set[asyncio.Task] = set()

        def resized():
            size = os.get_terminal_size(sys.stdout.fileno())
            frame = {"type": "resize", "cols": size.columns, "rows": size.lines}
            task = loop.create_task(ws.send(json.dumps(frame)))
            resizes.add(task)
            task.add_done_callback(resizes.discard)

        loop.add_signal_handler(signal.SIGWINCH, resized)
    reader = loop.create_task(_send_stdin(ws, stdin))
    status = SESSION_ENDED
    try:
        async for frame in ws:
            if isinstance(frame, bytes):
                os.write(sys.stdout.fileno(), frame)
                continue
            message = json.loads(frame)
            if message.get("type") == "exit":
                code = message["status"]
                status = 128 - code if code < 0 else code
            elif message.get("type") == "error":
                sys.stderr.write(f"gpu-portal: {message.get('message')}\r\n")
    except ConnectionClosed:
        pass
    finally:
        reader.cancel()
        if saved is not None:
            import termios

            loop.remove_signal_handler(signal.SIGWINCH)
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
    if ws.close_code == 4401:
        sys.stderr.write("gpu-portal: the session was closed: its token is no longer valid\n")
    return status


async def _send_stdin(ws, stdin: int) -> None:
    """Standard input as it comes, then eof (a command reading its input sees the end)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def readable():
        try:
            data = os.read(stdin, READ_BYTES)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(stdin)
        queue.put_nowait(data)

    try:
        loop.add_reader(stdin, readable)
    except (PermissionError, ValueError):  # a regular file or /dev/null: not pollable, read it at once
        with open(stdin, "rb", closefd=False) as stream:
            while data := stream.read(READ_BYTES):
                await ws.send(data)
        await ws.send(json.dumps({"type": "eof"}))
        return
    try:
        while data := await queue.get():
            await ws.send(data)
        await ws.send(json.dumps({"type": "eof"}))
    finally:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(stdin)


async def port_forward(
    url: str, token: str, request_id: int, local_port: int, remote_port: int, *, host="127.0.0.1", ready=None
) -> None:
    """Listen on host:local_port; each connection there reaches remote_port in the allocation through its
    own websocket. Runs until cancelled; `ready()` is called once listening."""
    path = f"ws/requests/{int(request_id)}/port-forward/{int(remote_port)}/"

    async def connection(reader, writer):
        try:
            async with open_websocket(url, token, path) as ws:
                await _pump(ws, reader, writer)
        except InvalidStatus as error:
            sys.stderr.write(f"gpu-portal: {refused(error).message}\n")
        except (OSError, ConnectionClosed):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, host, local_port)
    async with server:
        if ready is not None:
            ready()
        await server.serve_forever()


async def _pump(ws, reader, writer) -> None:
    async def upstream():
        while data := await reader.read(READ_BYTES):
            await ws.send(data)
        await ws.send(json.dumps({"type": "eof"}))

    sending = asyncio.create_task(upstream())
    try:
        async for frame in ws:
            if isinstance(frame, bytes):
                writer.write(frame)
                await writer.drain()
            elif json.loads(frame).get("type") == "error":
                sys.stderr.write(f"gpu-portal: {json.loads(frame).get('message')}\n")
    finally:
        sending.cancel()
