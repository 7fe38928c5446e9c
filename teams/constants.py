# Team secrets (TeamSecret). A value is masked in job logs wherever it appears: a shorter one would
# mask ordinary text ("a", "ok") and say what it is by where the stars fall.
TEAM_SECRET_MIN_CHARS = 4
MAX_SECRETS_PER_TEAM = 50  # each goes into every job's environment and is searched for in every log line
