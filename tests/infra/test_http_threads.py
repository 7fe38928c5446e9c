"""Plain HTTP served through Django's WSGI handler on threads (infra/http_threads.py)."""

import asyncio
import json
import threading

import pytest

from infra.http_threads import RESPONSE_BUFFER_BYTES, WsgiOnThreads, serving_loop


def scope(method="GET", path="/", query=b"", headers=()):
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "client": ("10.1.2.3", 5555),
        "headers": list(headers),
    }


def serve(app, scope, body_parts=(b"",), disconnect=False):
    """Run one request through `app`; returns the messages it sent."""
    incoming = [
        {"type": "http.request", "body": part, "more_body": i < len(body_parts) - 1}
        for i, part in enumerate(body_parts)
    ]
    if disconnect:
        incoming = [{"type": "http.request", "body": b"half", "more_body": True}, {"type": "http.disconnect"}]
    sent = []

    async def receive():
        return incoming.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def echo_environ(environ, start_response):
    """A WSGI app that answers with what it was given."""
    body = environ["wsgi.input"].read()
    start_response(
        "201 Created", [("Content-Type", "application/json"), ("X-Thread", threading.current_thread().name)]
    )
    seen = {
        key: environ[key]
        for key in ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "REMOTE_ADDR", "SERVER_PORT")
    }
    seen.update(
        {
            key: value
            for key, value in environ.items()
            if key.startswith("HTTP_") or key.startswith("CONTENT_")
        }
    )
    return [json.dumps({"environ": seen, "body": body.decode()}).encode()]


def test_the_request_reaches_the_wsgi_app_on_a_pool_thread_and_the_answer_comes_back():
    app = WsgiOnThreads(echo_environ, threads=2)
    headers = [
        (b"content-type", b"text/plain"),
        (b"x-trace", b"a"),
        (b"x-trace", b"b"),
        (b"content-length", b"11"),
    ]
    sent = serve(app, scope("POST", "/api/v1/caf\u00e9/", b"q=1", headers), body_parts=(b"hello ", b"world"))

    start, body = sent
    assert start["status"] == 201
    assert (b"content-type", b"application/json") in start["headers"]
    assert dict(start["headers"])[b"x-thread"].startswith(b"http")
    answer = json.loads(body["body"])
    assert answer["body"] == "hello world"
    assert answer["environ"]["PATH_INFO"] == "/api/v1/caf\u00e9/".encode().decode("latin1")  # PEP 3333
    assert answer["environ"]["QUERY_STRING"] == "q=1"
    assert answer["environ"]["REMOTE_ADDR"] == "10.1.2.3"
    assert answer["environ"]["HTTP_X_TRACE"] == "a,b"
    assert answer["environ"]["CONTENT_TYPE"] == "text/plain"
    assert answer["environ"]["CONTENT_LENGTH"] == "11"
    assert not body.get("more_body")


def test_a_large_answer_is_streamed_whole_and_closed_in_the_thread_that_made_it():
    closed_in = []
    piece = b"x" * 100_000

    class Answer:
        def __iter__(self):
            self.thread = threading.current_thread()
            return iter([piece] * 8)

        def close(self):
            closed_in.append(threading.current_thread() is self.thread)

    def big(environ, start_response):
        start_response("200 OK", [("Content-Length", str(len(piece) * 8))])
        return Answer()

    sent = serve(WsgiOnThreads(big, threads=1), scope())

    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    parts = sent[1:]
    assert len(parts) > 1 and all(part["more_body"] for part in parts[:-1]) and not parts[-1].get("more_body")
    assert b"".join(part["body"] for part in parts) == piece * 8
    assert max(len(part["body"]) for part in parts) <= RESPONSE_BUFFER_BYTES + len(piece)
    assert closed_in == [True]


def test_a_client_that_leaves_before_its_body_is_not_served():
    called = []

    def app(environ, start_response):
        called.append(environ)
        start_response("200 OK", [])
        return [b""]

    assert serve(WsgiOnThreads(app, threads=1), scope("POST"), disconnect=True) == []
    assert called == []


def test_the_serving_loop_is_known_only_while_it_runs():
    seen = []

    def app(environ, start_response):
        seen.append(serving_loop())
        start_response("204 No Content", [])
        return []

    serve(WsgiOnThreads(app, threads=1), scope())
    assert seen[0] is not None  # asked from the pool thread, during the request
    assert serving_loop() is None  # that loop has stopped


@pytest.mark.django_db
def test_django_pages_and_api_errors_are_served_through_it():
    from portal.asgi import application

    sent = serve(application, scope(path="/api/v1/requests/"))
    assert sent[0]["status"] == 401
    assert json.loads(sent[1]["body"])["error"]["fields"] == {}

    sent = serve(application, scope(path="/healthz/live"))
    assert sent[0]["status"] == 200
