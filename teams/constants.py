# The Unix account a team's or user's jobs run as on the nodes (DESIGN: a job runs as its team's or
# user's unprivileged identity). A POSIX user name as useradd takes it: at most 32 characters.
UNIX_ACCOUNT_MAX_CHARS = 32
UNIX_ACCOUNT_PATTERN = r"[a-z_][a-z0-9_-]*\$?"  # matched whole (re.fullmatch): no trailing newline
UNIX_ACCOUNTS_REFUSED = frozenset({"root"})  # uid 0: a job would own the node
# Without a mapping the node's agent creates and uses the system user gpp-<team slug>.
DEFAULT_UNIX_ACCOUNT_PREFIX = "gpp-"
