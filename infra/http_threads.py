"""Plain HTTP through Django's WSGI handler on a few threads of the ASGI server's process.

Why: every view here is synchronous. Django's ASGI handler runs such a view with several hops
between the event loop and threads per request (the request signals, the sync middleware chain,
the view), and that bookkeeping cost more CPU than the view itself under load. Here the loop reads
the body, hands the whole request to one thread, and sends what comes back: one hop. Websockets
stay on Channels (portal/asgi.py).

A thread keeps its database connection for the whole request and gives it back at the end
(Django's request_finished signal, sent when the response is closed in the same thread), so
`threads` should not exceed the connection pool (DATABASE_POOL_MAX_SIZE).
"""

import asyncio
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

# A body up to this size stays in memory; larger ones (uploads) spill to a temporary file.
BODY_IN_MEMORY_BYTES = 1024 * 1024
# A response is sent in one piece up to this size; a larger one (a big static file) is streamed.
RESPONSE_BUFFER_BYTES = 256 * 1024

_serving_loop: asyncio.AbstractEventLoop | None = None


def serving_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop serving HTTP in this process, while it runs; None outside an ASGI server."""
    loop = _serving_loop
    return loop if loop is not None and loop.is_running() else None


class WsgiOnThreads:
    """An ASGI app for the `http` scope that serves a WSGI app on a pool of `threads` threads."""

    def __init__(self, wsgi_app, threads: int):
        self.wsgi_app = wsgi_app
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="http")

    async def __call__(self, scope, receive, send):
        global _serving_loop
        loop = _serving_loop = asyncio.get_running_loop()
        with tempfile.SpooledTemporaryFile(max_size=BODY_IN_MEMORY_BYTES) as body:
            if not await _read_body(receive, body):
                return  # the client went away before sending the whole request
            start, rest = await loop.run_in_executor(self.executor, self._respond, scope, body, send, loop)
        if start is not None:
            await send(start)
        await send({"type": "http.response.body", "body": rest})

    def _respond(self, scope, body, send, loop) -> tuple[dict | None, bytes]:
        """Run the WSGI app in this thread; returns the start message (None when already sent)
        and the last part of the body. A large body is streamed from here, piece by piece."""
        started: dict = {}

        def start_response(status, headers, exc_info=None):
            encoded = [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers]
            started["message"] = {
                "type": "http.response.start",
                "status": int(status.split(" ", 1)[0]),
                "headers": encoded,
            }

        result = self.wsgi_app(_environ(scope, body), start_response)
        pending, size, start = [], 0, None
        try:
            for chunk in result:
                pending.append(chunk)
                size += len(chunk)
                if size > RESPONSE_BUFFER_BYTES:
                    if start is None:
                        start = started["message"]
                        _send_from_thread(send, start, loop)
                    part = {"type": "http.response.body", "body": b"".join(pending), "more_body": True}
                    _send_from_thread(send, part, loop)
                    pending, size = [], 0
        finally:
            if hasattr(result, "close"):
                result.close()  # request_finished: gives this thread's database connection back
        return (started["message"] if start is None else None), b"".join(pending)


async def _read_body(receive, body) -> bool:
    """Read the request body into `body`; False when the client disconnected first."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        body.write(message.get("body", b""))
        if not message.get("more_body"):
            body.seek(0)
            return True


def _send_from_thread(send, message: dict, loop) -> None:
    asyncio.run_coroutine_threadsafe(send(message), loop).result()


def _environ(scope, body) -> dict:
    """The WSGI environ of an ASGI http scope (PEP 3333: strings are latin-1 code points)."""
    script_name = scope.get("root_path", "").encode("utf8").decode("latin1")
    path_info = scope["path"].encode("utf8").decode("latin1")
    if script_name and path_info.startswith(script_name):
        path_info = path_info[len(script_name) :]
    server = scope.get("server") or ("localhost", 80)
    environ = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": script_name,
        "PATH_INFO": path_info,
        "QUERY_STRING": scope["query_string"].decode("latin1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1] or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if scope.get("client"):
        environ["REMOTE_ADDR"] = scope["client"][0]
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin1").upper().replace("-", "_")
        if name not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            name = f"HTTP_{name}"
        value = raw_value.decode("latin1")
        environ[name] = f"{environ[name]},{value}" if name in environ else value
    return environ
