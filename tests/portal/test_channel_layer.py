import os

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def test_channel_layer_matches_configuration_and_delivers():
    layer = get_channel_layer()
    expected = "RedisChannelLayer" if os.environ.get("REDIS_URL") else "InMemoryChannelLayer"
    assert type(layer).__name__ == expected

    async def roundtrip():
        channel = await layer.new_channel()
        await layer.group_add("test-group", channel)
        await layer.group_send("test-group", {"type": "ping", "n": 7})
        message = await layer.receive(channel)
        await layer.group_discard("test-group", channel)
        return message

    assert async_to_sync(roundtrip)() == {"type": "ping", "n": 7}
