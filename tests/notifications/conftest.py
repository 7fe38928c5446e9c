import pytest

from notifications.choices import ChannelKind
from notifications.services import create_channel
from tests.notifications.receiver import Receiver


@pytest.fixture(autouse=True)
def _loopback_receivers_allowed(settings):
    """The tests' receivers listen on loopback, which channels may reach only when allowed."""
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]


@pytest.fixture
def receiver():
    with Receiver() as running:
        yield running


@pytest.fixture
def webhook(team, team_admin, receiver):
    """The team's webhook channel to the receiver, which knows its secret."""
    channel, secret = create_channel(
        team_admin, team=team, kind=ChannelKind.WEBHOOK, name="ops hook", url=receiver.url
    )
    receiver.secret = secret
    return channel
