"""One settings module for every deployment, driven by environment variables.

Nothing set: the embedded default (DEBUG, SQLite under var/, in-memory channel
layer, in-process worker). Production sets DATABASE_URL, REDIS_URL, SECRET_KEY
(or SECRET_KEY_FILE), ALLOWED_HOSTS and DEBUG=0. See README "Running in production".
"""

from pathlib import Path

import dj_database_url
import plotly
from django.core.exceptions import ImproperlyConfigured

from infra.env import env_bool, env_fernet_keys, env_int, env_list, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", True)

SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off.")
    SECRET_KEY = "django-insecure-embedded-default-only-never-in-production"

# Team secrets (teams.TeamSecret) are encrypted with these Fernet keys: the first encrypts, every one
# decrypts (rotation). Unset: one key derived from SECRET_KEY, so changing SECRET_KEY then makes the
# stored secrets unreadable; production sets its own keys.
TEAM_SECRETS_KEYS = env_fernet_keys(
    "TEAM_SECRETS_KEYS", derive_from=SECRET_KEY, purpose=b"gpu-portal team secrets"
)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required when DEBUG is off (comma-separated host names).")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "infra",
    "portal",
    "teams",
    "audit",
    "notifications",
    "scheduler_app",
    "slurm_backend",
    "telemetry",
    "billing_app",
    "demo",
]

# The last entry is sync-only, so under ASGI Django runs the whole chain in the request's thread:
# one hop from the event loop and back, where async-capable middleware in between would each hop
# to a thread and back for every process_request and process_response (measured: most of the
# web process's CPU under load).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "infra.api.middleware.RefuseNulCharacters",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = "portal.wsgi.application"

FORM_RENDERER = "infra.form_rendering.PortalFormRenderer"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
# Connections per process (each ASGI worker, each Celery child) that PostgreSQL may see at most;
# 2 ASGI workers x 8 + the Celery worker's and beat's stays well under PostgreSQL's 100. 8, not 4:
# a request spends most of its time waiting on PostgreSQL, and with 4 threads per ASGI worker
# bench.load left half of each worker's core idle (108 vs 97 submits/s, p95 229 vs 366 ms).
DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 8, minimum=1)
# Threads per ASGI process serving plain HTTP (infra/http_threads.py), each holding at most one
# pooled connection during a request: as many as the pool, so no request waits for a connection.
HTTP_THREADS = DATABASE_POOL_MAX_SIZE
if DATABASE_URL:
    try:
        # conn_max_age must stay 0 with the pool: closing a connection returns it to the pool.
        DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
    except ValueError as error:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {error}") from None
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # The pool tests a connection as it lends it, so one PostgreSQL dropped (a restart, a failover,
        # pg_terminate_backend) is replaced, where it would fail the request that got it (tests/faults;
        # psycopg_pool waits a second, then longer, before it tries the next one): infra.postgresql.
        DATABASES["default"]["ENGINE"] = "infra.postgresql"
        # timeout: seconds a request waits for a free connection before it fails. The URL's own
        # options (?sslmode=require, ?application_name=...) are kept.
        DATABASES["default"]["OPTIONS"] = {
            **DATABASES["default"].get("OPTIONS", {}),
            "pool": {"min_size": 1, "max_size": DATABASE_POOL_MAX_SIZE, "timeout": 10},
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "portal.sqlite3",
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL={REDIS_URL!r} must start with redis://, rediss:// or unix://.")
# Redis that is away, refusing or accepting and never answering, costs a call at most this long, never
# a hang: every client connects and reads with this bound and does not retry (infra.redis_clients;
# Redis answers in well under a millisecond). Callers fall back: submits stay saved and the periodic
# pass schedules them, the rate counters count in the process (README "Running in production").
REDIS_TIMEOUT_S = 0.25
# After Redis did not answer, a process's calls to it fail at once for this long rather than each
# waiting REDIS_TIMEOUT_S; then it is asked again (readiness asks it every time).
REDIS_RETRY_AFTER_S = 5
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "infra.channel_layers.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "infra.channel_layers.ThreadSafeInMemoryChannelLayer"}}

# Celery: Redis in production; without REDIS_URL the embedded in-process worker
# runs the same services and Celery is not used.
CELERY_BROKER_URL = REDIS_URL or "memory://"
# max_retries 0: a publish tries once (the worker's own reconnects follow broker_connection_retry), and
# waits on Redis at most REDIS_TIMEOUT_S: queueing a task never holds a request.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": REDIS_TIMEOUT_S,
    "socket_timeout": REDIS_TIMEOUT_S,
    "max_retries": 0,
}
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
# Beat remembers when each entry last ran in this file (a shelve: one or more files with suffixes), under
# the var directory rather than wherever beat was started (it left celerybeat-schedule.* in the checkout).
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULER = "portal.celery:VarDirScheduler"

# How often a scheduling pass runs besides the ones that submits and releases ask for.
SCHEDULER_INTERVAL_S = env_int("SCHEDULER_INTERVAL_S", 10, minimum=1)
# Changes within this many seconds share one scheduling pass (production; 0: a pass at once).
SCHEDULER_BATCH_S = env_int("SCHEDULER_BATCH_S", 1, minimum=0)
# A ready node silent this long becomes suspect (no new work); this long, lost (its work is requeued).
NODE_SUSPECT_AFTER_S = env_int("NODE_SUSPECT_AFTER_S", 60, minimum=5)
NODE_LOST_AFTER_S = env_int("NODE_LOST_AFTER_S", 300, minimum=10)
# Slurm's ReturnToService: on, a node lost only because it stopped answering (the heartbeat watchdog
# lost it; not an operator's mark) is back in service when its agent registers again; off, it stays
# lost until an operator resumes it (its node page: Ready; or POST /api/v1/nodes/<id>/undrain/).
NODE_RETURN_TO_SERVICE = env_bool("NODE_RETURN_TO_SERVICE", False)
# Where node agents keep each job's checkpoints: storage every node mounts at this path, so requeued
# work resumes from its checkpoint wherever it lands next.
CHECKPOINT_ROOT = env_str("CHECKPOINT_ROOT", str(VAR_DIR / "checkpoints"))
# Telemetry (telemetry.rollups, telemetry.derived_metrics): how long raw samples, 1-minute and
# 1-hour rollups are kept, and how often the rollup-and-checks task runs.
TELEMETRY_INTERVAL_S = env_int("TELEMETRY_INTERVAL_S", 60, minimum=10)
# How often the occupancy and replay spot feeds move their pools' prices (CELERY_BEAT_SCHEDULE's spot-feeds).
SPOT_FEED_INTERVAL_S = env_int("SPOT_FEED_INTERVAL_S", 10, minimum=1)
TELEMETRY_RAW_RETENTION_S = env_int("TELEMETRY_RAW_RETENTION_S", 3 * 3600, minimum=3600)
TELEMETRY_MINUTE_RETENTION_S = env_int("TELEMETRY_MINUTE_RETENTION_S", 14 * 86400, minimum=86400)
TELEMETRY_HOUR_RETENTION_S = env_int("TELEMETRY_HOUR_RETENTION_S", 400 * 86400, minimum=7 * 86400)
# Minutes with a sample received this recently are rolled up again (late batches land in their minute).
TELEMETRY_ROLLUP_LOOKBACK_S = env_int("TELEMETRY_ROLLUP_LOOKBACK_S", 300, minimum=120)
# Idle: every card of a running request under 5 % util this long; slow network: a node's mean
# throughput under this floor while it runs work.
TELEMETRY_IDLE_AFTER_S = env_int("TELEMETRY_IDLE_AFTER_S", 1800, minimum=300)
TELEMETRY_NETWORK_FLOOR_BYTES_PER_S = env_int("TELEMETRY_NETWORK_FLOOR_BYTES_PER_S", 500_000_000, minimum=0)
# GET /metrics (Prometheus, DCGM exporter names): this bearer token, or a signed-in staff user.
METRICS_BEARER_TOKEN = env_secret("METRICS_BEARER_TOKEN")

# Slurm pools (slurm_backend): how often the portal reads Slurm and submits the work placed there, and
# how long a job it stops (cancelled, released, preempted) has after SIGTERM before SIGKILL.
SLURM_SYNC_INTERVAL_S = env_int("SLURM_SYNC_INTERVAL_S", 2, minimum=1)
SLURM_STOP_GRACE_S = env_int("SLURM_STOP_GRACE_S", 30, minimum=0)
# Between syncs, the jobs submitted and not yet running are asked after this often (only those, and
# only for SLURM_START_WATCH_S after their submit), so a request shows running within a fraction of a
# second of Slurm starting it rather than at the next sync.
SLURM_START_POLL_MS = env_int("SLURM_START_POLL_MS", 250, minimum=50)
SLURM_START_WATCH_S = env_int("SLURM_START_WATCH_S", 60, minimum=0)

# Notification channels (notifications): how long a webhook or Slack delivery waits for an answer, and
# how often the due deliveries are scanned for (retries, and any whose task message was lost).
NOTIFICATION_TIMEOUT_S = env_int("NOTIFICATION_TIMEOUT_S", 10, minimum=1)
NOTIFICATION_SCAN_INTERVAL_S = env_int("NOTIFICATION_SCAN_INTERVAL_S", 5, minimum=1)
# Webhook and Slack URLs never reach a loopback, private, link-local or other non-public address
# (notifications.egress), but for these hosts: host names, addresses or networks, comma-separated.
NOTIFICATION_ALLOWED_PRIVATE_HOSTS = env_list("NOTIFICATION_ALLOWED_PRIVATE_HOSTS", [])
# Deliveries finished (delivered or given up) longer ago than this are deleted with their attempts.
NOTIFICATION_RETENTION_DAYS = env_int("NOTIFICATION_RETENTION_DAYS", 30, minimum=1)

# The periodic work, in production (Celery beat) and in the embedded default (scheduler_app.passes.dispatch's
# EmbeddedWorker runs the same tasks in-process, each at its "schedule" in seconds). The embedded worker
# runs the entries due together in this order: the watchdogs before the pass, so it sees the nodes they
# lost and the work they requeued; the telemetry upkeep before the resize offers that read its rollups.
CELERY_BEAT_SCHEDULE = {
    "heartbeat-watchdog": {
        "task": "scheduler_app.heartbeat_watchdog",
        "schedule": float(NODE_SUSPECT_AFTER_S) / 2,
    },
    # Stops past their deadline, missed checkpoint intervals, moves due at an interval's end.
    "migration-watchdog": {
        "task": "scheduler_app.migration_watchdog",
        "schedule": float(SCHEDULER_INTERVAL_S),
    },
    "scheduling-pass": {"task": "scheduler_app.scheduling_pass", "schedule": float(SCHEDULER_INTERVAL_S)},
    # Slurm pools: their nodes, the work placed on them submitted, their jobs' states and output read.
    "slurm-sync": {"task": "slurm_backend.sync", "schedule": float(SLURM_SYNC_INTERVAL_S)},
    "slurm-starts": {
        "task": "slurm_backend.follow_starts",
        "schedule": SLURM_START_POLL_MS / 1000,
        "options": {"expires": SLURM_START_POLL_MS / 1000},
    },
    # The live streams' 1 Hz deltas; a tick not started within its second is dropped, not queued.
    "live-tick": {"task": "scheduler_app.live_tick", "schedule": 1.0, "options": {"expires": 1.0}},
    "telemetry-upkeep": {"task": "scheduler_app.telemetry_upkeep", "schedule": float(TELEMETRY_INTERVAL_S)},
    "resize-offers": {"task": "billing_app.offer_resizes", "schedule": float(TELEMETRY_INTERVAL_S)},
    "spot-feeds": {"task": "billing_app.advance_spot_feeds", "schedule": float(SPOT_FEED_INTERVAL_S)},
    # Notification deliveries due (first tries whose task message was lost, retries, claims run out).
    "notification-deliveries": {
        "task": "notifications.deliver_due",
        "schedule": float(NOTIFICATION_SCAN_INTERVAL_S),
    },
    # What-ifs whose task message was lost (each is claimed once, so a repeat does nothing).
    "queued-what-ifs": {"task": "scheduler_app.queued_what_ifs", "schedule": 60.0},
}

# An API write's Idempotency-Key (infra.idempotency) answers repeats for at least this long; every
# TELEMETRY_INTERVAL_S, CELERY_BEAT_SCHEDULE's idempotency-keys forgets older keys.
IDEMPOTENCY_KEY_TTL_S = env_int("IDEMPOTENCY_KEY_TTL_S", 24 * 3600, minimum=3600)
CELERY_BEAT_SCHEDULE["idempotency-keys"] = {
    "task": "portal.forget_idempotency_keys",
    "schedule": float(TELEMETRY_INTERVAL_S),
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Sign-in throttling (infra.login_throttle): failures allowed per window, per account and per client
# address (REMOTE_ADDR: behind a proxy, name it in uvicorn's --forwarded-allow-ips so it is the client's).
LOGIN_FAILURES_PER_ACCOUNT = env_int("LOGIN_FAILURES_PER_ACCOUNT", 10, minimum=1)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 50, minimum=1)
LOGIN_FAILURE_WINDOW_S = env_int("LOGIN_FAILURE_WINDOW_S", 900, minimum=60)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# plotly.js comes from the pinned plotly package, served as our own static file: no CDN, works offline.
STATICFILES_DIRS = [BASE_DIR / "static", ("vendor/plotly", Path(plotly.__file__).parent / "package_data")]
# The embedded default serves static files straight from the apps (WHITENOISE_USE_FINDERS);
# production serves what `collectstatic` gathered into STATIC_ROOT.
STATIC_ROOT = env_str("STATIC_ROOT", "" if DEBUG else str(BASE_DIR / "staticfiles")) or None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "infra.api.schema.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "teams.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["infra.api.throttling.PerUserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api": env_str("API_THROTTLE_RATE", "600/min")},
    "DEFAULT_PAGINATION_CLASS": "infra.api.pagination.Pagination",
    "EXCEPTION_HANDLER": "infra.api.errors.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["infra.api.parsers.JsonParser"],
}

# API throttle and sign-in counters (infra.rate_limits) must be shared by every process in production.
if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "infra.redis_cache.RedisCache", "LOCATION": REDIS_URL},
    }
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "VERSION": "1.0.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Billing modes and capacity types share their values; one enum serves both.
    "ENUM_NAME_OVERRIDES": {
        "OnDemandOrSpotEnum": "scheduler_app.choices.CapacityType",
        "ResizeStateEnum": "billing_app.choices.ResizeState",
        "RequestStateEnum": "scheduler_app.choices.RequestState",
        "MigModeEnum": "scheduler_app.choices.MigMode",
        "ChannelKindEnum": "notifications.choices.ChannelKind",
        "NotificationEventKindEnum": "notifications.choices.EventKind",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "infra.api.errors.document_errors",
    ],
}

# Behind TLS in production: strict transport and secure cookies. Off in the
# embedded default, which serves plain HTTP on loopback.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
# Probes call the process itself over plain HTTP, behind the TLS proxy.
SECURE_REDIRECT_EXEMPT = [r"^healthz/"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_TLS_PROXY", False) else None
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG

# Spot work must checkpoint at least this often (DESIGN: "≤ 30 min, configurable").
SPOT_MAX_CHECKPOINT_INTERVAL_S = env_int("SPOT_MAX_CHECKPOINT_INTERVAL_S", 1800, minimum=60)
# Checkpoint, then move: how long preempted work has to checkpoint and stop, how long work moved at a
# checkpoint (drain, move to on-demand) has to stop, and an operator's reclaim without a deadline.
PREEMPTION_GRACE_S = env_int("PREEMPTION_GRACE_S", 120, minimum=0)
MOVE_AT_CHECKPOINT_GRACE_S = env_int("MOVE_AT_CHECKPOINT_GRACE_S", 60, minimum=0)
RECLAIM_DEFAULT_GRACE_S = env_int("RECLAIM_DEFAULT_GRACE_S", 120, minimum=0)
# Consolidation: a job is moved to make room for other work at most once per interval, and one pass
# plans at most this many moves.
CONSOLIDATION_MIN_INTERVAL_S = env_int("CONSOLIDATION_MIN_INTERVAL_S", 3600, minimum=0)
CONSOLIDATION_MAX_MOVES_PER_PASS = env_int("CONSOLIDATION_MAX_MOVES_PER_PASS", 4, minimum=0)
# A stop past its deadline is requeued by the watchdog once its agent had this long to report it.
STOP_REPORT_SLACK_S = env_int("STOP_REPORT_SLACK_S", 10, minimum=0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"refusals_without_traceback": {"()": "infra.log_filters.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"filters": ["refusals_without_traceback"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# Mail (budget alerts): the console in the embedded default; SMTP when EMAIL_HOST is set.
EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-portal@localhost")
# How often the metering task bills the slices' time into the ledger (and checks the budgets).
METERING_INTERVAL_S = env_int("METERING_INTERVAL_S", 30, minimum=1)
CELERY_BEAT_SCHEDULE["metering"] = {"task": "billing_app.meter_usage", "schedule": float(METERING_INTERVAL_S)}
# How far behind now an open slice is metered: a pass closes slices at its own clock, which may be a
# little older than the metering run's, and no second may be billed past a slice's end.
METERING_SETTLE_S = env_int("METERING_SETTLE_S", 60, minimum=0)
