"""A real webhook receiver on loopback, as a team would run one: it verifies each delivery's signature and
timestamp with the channel's secret, counts events by their id (a repeat is de-duplicated), and answers
what the test scripts (status codes in turn; a delay that keeps a sender waiting mid-delivery)."""

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from notifications.constants import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from notifications.signing import verify


class Receiver:
    def __init__(self):
        self.secret = ""
        self.statuses: list[int] = []  # answered in turn; 200 once they run out
        self.delay_s = 0.0
        self.arrivals: list[dict] = []  # every request received, verified or not, repeats included
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.receive(self, body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/gpu-portal"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def receive(self, handler, body: bytes) -> None:
        verified = verify(
            self.secret,
            handler.headers.get(TIMESTAMP_HEADER),
            handler.headers.get(SIGNATURE_HEADER),
            body,
            now=time.time(),
        )
        payload = json.loads(body)
        with self.lock:
            status = self.statuses.pop(0) if self.statuses else 200
            self.arrivals.append(
                {
                    "id": payload.get("id"),
                    "header_id": handler.headers.get(DELIVERY_HEADER),
                    "host": handler.headers.get("Host"),
                    "verified": verified,
                    "payload": payload,
                    "status": status if verified else 401,
                }
            )
            delay = self.delay_s
        if delay:
            time.sleep(delay)
        handler.send_response(status if verified else 401)
        handler.end_headers()

    def accepted_ids(self) -> Counter:
        """Each verified delivery's id, counted once per arrival that was answered 2xx."""
        with self.lock:
            return Counter(a["id"] for a in self.arrivals if a["verified"] and a["status"] < 300)

    def events_counted(self) -> set[str]:
        """What a de-duplicating receiver counts: each verified id once, however often it came."""
        return set(self.accepted_ids())

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
