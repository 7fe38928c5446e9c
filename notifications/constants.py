"""Limits and names of the notification channels (see docs/user-guide.md, "Notification channels")."""

# A delivery is tried at most this often; the waits between tries double from BACKOFF_FIRST_S, capped.
MAX_ATTEMPTS = 8
BACKOFF_FIRST_S = 10
BACKOFF_MAX_S = 3600
# This many deliveries in a row given up on pause the channel, and its owner is told.
PAUSE_AFTER_FAILED_DELIVERIES = 3
# A delivery being sent is claimed this long past its request timeout: a worker killed mid-delivery
# leaves the claim to expire, and the next scan sends it again (with the same id).
CLAIM_MARGIN_S = 15
# What a scan sends at most (the rest waits for the next one).
SCAN_BATCH = 200
# Old deliveries are deleted this many per transaction (notifications.retention).
PRUNE_BATCH = 1000
URL_MAX_CHARS = 2000
NAME_MAX_CHARS = 100
# The headers of a webhook delivery.
DELIVERY_HEADER = "X-GPU-Portal-Delivery"
EVENT_HEADER = "X-GPU-Portal-Event"
TIMESTAMP_HEADER = "X-GPU-Portal-Timestamp"
SIGNATURE_HEADER = "X-GPU-Portal-Signature"
# A receiver refuses a timestamp further than this from its clock (a replayed old delivery).
REPLAY_WINDOW_S = 300
# The name a release by the idle policy is logged under (telemetry.idle.POLICY).
IDLE_POLICY_ACTOR = "idle policy"
# The delivery log a channel's page shows.
LOG_LENGTH = 50
