# Plain Python, no Django: the pure core (scheduler_app/core/) imports this module too.
MILLI_PER_GPU = 1000  # the one definition; the SDK, a separate distribution, keeps its own copy
DEFAULT_GRANULARITY_MILLI = 125  # eighths of a card
MAX_GPUS_PER_REQUEST = 8

# Telemetry from node agents (GpuSample). Power is in milliwatts, as NVML reports it.
MAX_POWER_MW = 5_000_000  # 5 kW: above any card, so a larger reading is a broken sensor or unit
MAX_TEMPERATURE_C = 150  # NVML reports unsigned whole degrees; no working card is hotter
SAMPLE_MAX_FUTURE_SKEW_S = 60  # a node's clock may run this far ahead of the portal's
SAMPLE_MAX_AGE_S = 3600  # older batches (an agent replaying a backlog) are refused, not stored
MAX_GPUS_PER_SAMPLE_BATCH = 64
MAX_MOMENTS_PER_SAMPLE_BATCH = 60  # an agent may send up to a minute of 1 Hz readings in one request
MAX_NETWORK_BYTES_PER_S = 400 * 10**9  # 3.2 Tb/s: above any node's links, so a larger reading is broken
UTILIZATION_WINDOW_S = 900  # what the utilization endpoint summarizes: a slice's last 15 minutes at most
UTILIZATION_MAX_POINTS = 60  # the window's series is downsampled to at most this many points
CURRENT_LOAD_WINDOW_S = 60  # "how busy is it now": the mean of each card's readings in the last minute
TELEMETRY_MAX_RANGE_S = 400 * 86400  # the longest range a telemetry query answers (hour rollups)
UTIL_STDDEV_TARGET_PERCENT = 15  # DESIGN: steady work keeps util std-dev under 15 %
LIVE_READING_MAX_AGE_S = 15  # the live stream shows a card's util only while its latest reading is this fresh

# The node agent's protocol.
CHECKPOINT_EVENT = "checkpoint"  # what a job's reported checkpoint writes in its request's event log
CARDS_EVENT = "cards changed"  # a cluster manager ran the slices on other cards of their node
# Who marks a silent node suspect and then lost, in the event log: a node lost by this actor stopped
# answering (what NODE_RETURN_TO_SERVICE may undo), not an operator's choice.
HEARTBEAT_WATCHDOG = "heartbeat watchdog"
MAX_GPUS_PER_NODE = 64
LOG_CHUNK_MAX_CHARS = 64 * 1024  # one log report at most; the agent ships longer output in pieces
LOG_MAX_CHARS_PER_REQUEST = 1024 * 1024  # the oldest chunks go beyond this: the page shows the tail
EXIT_CODE_RANGE = (-255, 255)  # negative: the signal that killed the job (Popen's convention)

# Interactive work in use (services.sessions.record_activity): the last terminal input or kernel run is
# stored to this resolution, so a relay may report every frame and the database sees one write a window.
ACTIVITY_RESOLUTION_S = 30
ACTIVE_AGAIN_EVENT = "active again"  # in its log: input came after an idle warning, the stop is off
