"""The SDK against the real portal: pytest-django's live server, real tokens, no mocks of the SDK.
Time is fake: the injected sleep records each wait and moves a fake clock instead of sleeping."""

import datetime as dt
import socket

import pytest
from django.utils import timezone
from gpu_portal_sdk import ResourceManager

from teams.services import create_api_token


class FakeTime:
    """sleep() records the delay and advances monotonic(); `on_sleep` lets a test act meanwhile
    (run a scheduling pass, reset the throttle) as the world would while the client waits."""

    def __init__(self):
        self.now = 1000.0
        self.slept: list[float] = []
        self.on_sleep = None

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()

    def monotonic(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_saved_login(tmp_path, monkeypatch):
    """Each test starts with no GPU_PORTAL_* variables and its own config path (nothing there yet),
    so neither the machine's environment nor a real ~/.config/gpu-portal/config.toml leaks in."""
    for name in ("GPU_PORTAL_URL", "GPU_PORTAL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "gpu-portal" / "config.toml"
    monkeypatch.setenv("GPU_PORTAL_CONFIG", str(path))
    return path


@pytest.fixture
def fake_time():
    return FakeTime()


@pytest.fixture
def token():
    """token(user) -> a fresh personal API token secret."""

    def make(user):
        return create_api_token(user, name="sdk", expires_at=timezone.now() + dt.timedelta(days=1))[1]

    return make


@pytest.fixture
def as_user(live_server, transactional_db, token, monkeypatch):
    """as_user(user): GPU_PORTAL_URL and GPU_PORTAL_TOKEN point at the live portal as that user (the CLI's
    tests)."""

    def login(user):
        monkeypatch.setenv("GPU_PORTAL_URL", live_server.url)
        monkeypatch.setenv("GPU_PORTAL_TOKEN", token(user))

    return login


@pytest.fixture
def connect(live_server, transactional_db, token, fake_time):
    """connect(user, **options) -> a ResourceManager on the live portal acting as `user`.
    Backoff jitter is pinned at its top (random() == 1.0) so the waits are exact."""

    def make(user=None, *, url=None, secret=None, **options):
        return ResourceManager(
            url or live_server.url,
            secret or token(user),
            sleep=fake_time.sleep,
            clock=fake_time.monotonic,
            random=lambda: 1.0,
            **options,
        )

    return make


@pytest.fixture
def cluster(make_node):
    return make_node(gpus=2)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
