"""The webhook signature: what the portal signs is what a receiver verifies; a changed body, another
secret or an old timestamp is refused."""

import time
from pathlib import Path

from notifications.constants import REPLAY_WINDOW_S
from notifications.signing import SECRET_PREFIX, new_secret, signature, verify

BODY = b'{"id":"d1","type":"request.failed"}'


def test_a_signed_body_verifies_with_the_same_secret_within_the_window():
    secret = new_secret()
    sent = signature(secret, 1_700_000_000, BODY)

    assert sent.startswith("sha256=") and len(sent) == len("sha256=") + 64
    assert verify(secret, "1700000000", sent, BODY, now=1_700_000_000 + REPLAY_WINDOW_S)


def test_a_changed_body_another_secret_or_an_old_timestamp_is_refused():
    secret = new_secret()
    sent = signature(secret, 1_700_000_000, BODY)

    assert not verify(secret, "1700000000", sent, BODY + b" ", now=1_700_000_000)
    assert not verify(new_secret(), "1700000000", sent, BODY, now=1_700_000_000)
    assert not verify(secret, "1700000000", sent, BODY, now=1_700_000_000 + REPLAY_WINDOW_S + 1)
    assert not verify(secret, "1700000001", sent, BODY, now=1_700_000_000)  # the timestamp is signed too
    assert not verify(secret, "soon", sent, BODY, now=1_700_000_000)
    assert not verify(secret, "1700000000", None, BODY, now=1_700_000_000)


def test_each_secret_is_new_and_long():
    secrets = {new_secret() for _ in range(20)}

    assert len(secrets) == 20
    assert all(s.startswith(SECRET_PREFIX) and len(s) >= 40 for s in secrets)


def test_the_user_guides_verification_snippet_accepts_a_signed_delivery_and_refuses_a_changed_one():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "user-guide.md").read_text()
    snippet = guide.split("```python\nimport hashlib, hmac, time\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec("import hashlib, hmac, time\n" + snippet, namespace)
    secret, now = new_secret(), int(time.time())
    headers = {"X-GPU-Portal-Timestamp": str(now), "X-GPU-Portal-Signature": signature(secret, now, BODY)}

    assert namespace["verify"](secret, headers, BODY)
    assert not namespace["verify"](secret, headers, BODY + b"x")
    assert not namespace["verify"](secret, headers | {"X-GPU-Portal-Timestamp": str(now - 301)}, BODY)
