"""The webhook signature: what the portal signs is what a receiver verifies; a changed body, another
secret or an old timestamp is refused."""

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
