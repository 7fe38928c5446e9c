# Team secrets (TeamSecret). A value is masked in job logs wherever it appears: a shorter one would
# mask ordinary text ("a", "ok") and say what it is by where the stars fall.
TEAM_SECRET_MIN_CHARS = 4
MAX_SECRETS_PER_TEAM = 50  # each goes into every job's environment and is searched for in every log line

# A job's environment: the variables a request declares and its team's secrets (teams.TeamSecret).
# Names as POSIX shells take them, so a job's `$NAME` works; the limits keep the agent's work list small.
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
ENV_NAME_MAX_CHARS = 128
ENV_VALUE_MAX_CHARS = 4096
MAX_ENV_VARIABLES_PER_REQUEST = 64
# The node agent sets these for every job (its cards, its slice, its identity, the simulated NVML):
# a request or a secret that set them could leave its slice or pose as another job, so they are refused.
RESERVED_ENV_NAMES = frozenset(
    {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HOME", "USER", "LOGNAME"}
)
RESERVED_ENV_PREFIXES = ("GPU_PORTAL_", "CUDA_MPS_", "SIMNVML_")

# The Unix account a team's or user's jobs run as on the nodes (DESIGN: a job runs as its team's or
# user's unprivileged identity). A POSIX user name as useradd takes it: at most 32 characters.
UNIX_ACCOUNT_MAX_CHARS = 32
UNIX_ACCOUNT_PATTERN = r"[a-z_][a-z0-9_-]*\$?"  # matched whole (re.fullmatch): no trailing newline
UNIX_ACCOUNTS_REFUSED = frozenset({"root"})  # uid 0: a job would own the node
# Without a mapping the node's agent creates and uses the system user gpp-<team slug>.
DEFAULT_UNIX_ACCOUNT_PREFIX = "gpp-"

# Idle work (telemetry.idle): a team's idle time in minutes (blank: the site's TELEMETRY_IDLE_AFTER_S),
# and the utilization under which its cards count as idle.
IDLE_MINUTES_MIN = 5
IDLE_MINUTES_MAX = 7 * 24 * 60
IDLE_UTIL_PERCENT_DEFAULT = 5
