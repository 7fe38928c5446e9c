from django.db import models


class NoticeKind(models.TextChoices):
    """What a notice to a team is about; each is also an Event's to_state on the work concerned."""

    UTIL_JITTER = "util_jitter", "Unsteady utilization"
    MEMORY_LEAK = "memory_leak", "GPU memory growing"
    IDLE = "idle", "Idle GPUs"
    NETWORK_SLOW = "network_slow", "Slow node network"
    RESIZE_OFFER = "resize_offer", "Resize offered"
    BUDGET = "budget", "Budget threshold crossed"
    CHECKPOINT_MISSED = "checkpoint_missed", "Checkpoint missed"
    CHANNEL_PAUSED = "channel_paused", "Notification channel paused"
