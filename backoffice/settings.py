"""Settings for the refund back office, read from the environment (one module, no forks).

Grouped by concern, in this order: reading the environment; mode and secrets; Django's
wiring; the database; web hardening and the client's address; admin sign-in and the
second factor; the payment provider; refunds; retention; the REST API; outbound webhooks;
logs, metrics and caches.

Every environment variable is read through `env` (backoffice/environment.py), which gives
each its kind, default and bounds here: a bad value stops manage.py and gunicorn with one
line naming it (backoffice/startup.py). docs/operating/configuration.md lists them all."""

import secrets
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from backoffice import environment
from backoffice.environment import env
from ledger_app.api_versions import published

BASE_DIR = Path(__file__).resolve().parent.parent

# === Reading the environment ===========================================================
# `make run` writes `.env` (git-ignored) with the demo's switches, so that every
# `manage.py` command in that checkout runs as the demo server does. The environment wins
# over it; DJANGO_DOTENV=false skips it (the test suite does: backoffice/pytest_defaults.py).
# A checkout without `.env` is as strict as production. It is loaded into os.environ, not
# only into the reader, because gunicorn.conf.py and prometheus_client read it there too.
if env.switch("DJANGO_DOTENV", True):
    load_dotenv(BASE_DIR / ".env", override=False)


def local_secret_key() -> str:
    """A per-checkout key kept out of git, so no shared default key exists anywhere."""
    path = BASE_DIR / ".secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(50)
        path.write_text(key)
        path.chmod(0o600)
        return key


# === Mode and secrets ==================================================================
# DJANGO_DEBUG=true is the development and demo mode (`make run`). Anything else is
# production: it needs DJANGO_SECRET_KEY (the same on every host) and two factors for
# whoever moves money. docs/operating/production.md lists every setting below.
DEBUG = env.switch("DJANGO_DEBUG", False)
SECRET_KEY = env.text("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set, so this is production mode, which needs one "
            "secret key shared by every host (docs/operating/production.md, Running in "
            "production). For the demo, run `make run` once in this checkout (it writes "
            ".env, and every manage.py command then runs as the demo), or set "
            "DJANGO_DEBUG=true."
        )
    SECRET_KEY = local_secret_key()
# The provider's: the API key for LEDGER_GATEWAY=stripe, and the secret that signs its
# webhooks to POST /webhooks/stripe (Stripe's whsec_...; without it every inbound webhook is
# refused).
STRIPE_API_KEY = env.text("STRIPE_API_KEY")
STRIPE_WEBHOOK_SECRET = env.text("STRIPE_WEBHOOK_SECRET")
# GET /metrics: with a token, the scraper must send `Authorization: Bearer <METRICS_TOKEN>`
# (anything else is answered 401); without one the page is open, for a scraper on a private
# network (docs/operating/metrics.md).
METRICS_TOKEN = env.text("METRICS_TOKEN")
# Webhook signing secrets are encrypted at rest (ledger_app/encryption.py) with these Fernet
# keys, comma-separated: the first encrypts, every one decrypts (rotation and how to make a
# key: docs/operating/secrets.md). Unset: a key derived from DJANGO_SECRET_KEY (`check
# --deploy` warns). A key that is not one refuses to start.
WEBHOOK_SECRET_KEYS = env.fernet_keys("WEBHOOK_SECRET_KEYS")
# Production refuses a secret that is a shipped placeholder or too short to be random:
# backoffice/production_secrets.py, docs/operating/secrets.md.
if not DEBUG:
    from backoffice.production_secrets import refuse_weak_secrets

    refuse_weak_secrets(
        {
            "DJANGO_SECRET_KEY": SECRET_KEY,
            "STRIPE_WEBHOOK_SECRET": STRIPE_WEBHOOK_SECRET,
            "STRIPE_API_KEY": STRIPE_API_KEY,
            "METRICS_TOKEN": METRICS_TOKEN,
            "WEBHOOK_SECRET_KEYS": ",".join(WEBHOOK_SECRET_KEYS),
        }
    )

# === Django's wiring ===================================================================
ALLOWED_HOSTS = env.names("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")

INSTALLED_APPS = [
    # django.contrib.admin, with its site a BackOfficeAdminSite (backoffice/admin_site.py).
    "backoffice.admin_site.BackOfficeAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "ledger_app",
    "simulated_provider",
]

MIDDLEWARE = [
    # Outermost, so it counts the response the client got (ledger_app/metrics/middleware.py).
    "ledger_app.metrics.middleware.RequestMetricsMiddleware",
    "serving.request_id.RequestIdMiddleware",
    # A 503 page (the API's envelope under /v1/) while the database is away, not a 500.
    "serving.database_away.DatabaseAwayMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "serving.security.ApiNoStoreMiddleware",
    "ledger_app.api.versions.ApiVersionHeaderMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "ledger_app.access.time_zones.AdminTimeZoneMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After the session, the user's second factor (OTP) and messages: every admin write
    # needs a fresh code (ledger_app/admin/write_gate.py).
    "ledger_app.admin.write_gate.AdminWriteGateMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "backoffice.urls"

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

WSGI_APPLICATION = "backoffice.wsgi.application"
ASGI_APPLICATION = "backoffice.asgi.application"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"  # what is stored, logged and spoken by the API and the commands
USE_I18N = True
USE_TZ = True
# The admin shows times in the reader's zone: their own (set under "Time zone" in the admin's
# user links) or this default, an IANA name such as Europe/Paris; every time it shows is
# labelled with its zone (ledger_app/access/time_zones.py, backoffice/formats/en/formats.py).
# With LANGUAGE_CODE en-us the locale's formats win over DATETIME_FORMAT settings, hence a
# module.
ADMIN_TIME_ZONE = env.time_zone("ADMIN_TIME_ZONE", "UTC")
FORMAT_MODULE_PATH = ["backoffice.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves STATIC_ROOT (filled by collectstatic, which `make run` runs).

# === The database ======================================================================
# The embedded default is a SQLite file. PostgreSQL (production) comes in through
# DATABASE_URL, e.g. postgres://root@127.0.0.1:5432/test.
DEFAULT_DATABASE_URL = f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
DATABASE_CONN_MAX_AGE = env.count("DATABASE_CONN_MAX_AGE", 60, of="seconds", low=0, high=86_400)
DATABASES = {
    "default": env.database(
        "DATABASE_URL",
        DEFAULT_DATABASE_URL,
        conn_max_age=DATABASE_CONN_MAX_AGE,
        conn_health_checks=True,
    )
}
# A request never queues forever behind a row lock: past this it is refused with 409
# (lock_timeout / idempotency_key_in_use) and the client retries with its key. It bounds
# all the lock waits of one refund or charge together, not each (ledger_app/db.py,
# lock_wait_budget).
DATABASE_LOCK_TIMEOUT_MS = env.count(
    "DATABASE_LOCK_TIMEOUT_MS", 5000, of="milliseconds", high=600_000
)
# How long opening a connection to PostgreSQL may take before it is given up (a server
# that does not answer): a request then gets a 503 in about this long, not after the
# operating system's own TCP timeout of minutes.
DATABASE_CONNECT_TIMEOUT_SECONDS = env.count(
    "DATABASE_CONNECT_TIMEOUT_SECONDS", 3, of="seconds", high=600
)
# The statements every refund runs (ledger_app/db.py, statement_cursor) are prepared on a
# PostgreSQL connection after this many runs of one, so PostgreSQL stops parsing and
# planning them each time; Django's own queries are never prepared. A pooler that hands one
# session's statements to another (PgBouncer in transaction mode before 1.21) needs
# DATABASE_PREPARED_STATEMENTS=false.
DATABASE_PREPARED_STATEMENTS = env.switch("DATABASE_PREPARED_STATEMENTS", True)
# A pooler in transaction mode between the back office and PostgreSQL (PgBouncer's
# pool_mode=transaction, docs/operating/high-availability.md) hands each transaction
# whichever server connection is free, so nothing may live in a session across
# transactions: no prepared statements, and no session options at connect (the pooler would
# refuse them), so lock_timeout comes from the server's or the role's own setting. Every
# server-side cursor already lives inside a transaction (ledger_app/db.py, streamed).
DATABASE_TRANSACTION_POOLER = env.switch("DATABASE_TRANSACTION_POOLER", False)
# Django's psycopg pool, per process: threads share DATABASE_POOL_MAX_SIZE connections and
# hand them back between transactions (and while waiting on the provider), instead of each
# thread keeping its own. 0: no pool, a persistent connection per thread. A thread waits at
# most DATABASE_POOL_TIMEOUT_SECONDS for one: as short as the connect timeout by default,
# so while PostgreSQL is away a request gives up (503) after it instead of holding its thread.
DATABASE_POOL_MAX_SIZE = env.count("DATABASE_POOL_MAX_SIZE", 0, of="connections", low=0, high=1_000)
DATABASE_POOL_TIMEOUT_SECONDS = env.number(
    "DATABASE_POOL_TIMEOUT_SECONDS", 3, of="seconds", high=600
)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # select_for_update is a no-op on SQLite. IMMEDIATE makes every write
    # transaction take the database write lock at BEGIN, which is what keeps
    # two refunds on one charge from interleaving.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests use a file, never :memory:, so threads really share one database.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / ".test-db.sqlite3")}
# Lets parallel test runs share one server (a name of their own each).
DATABASE_TEST_NAME = env.text("DATABASE_TEST_NAME")
if DATABASE_TEST_NAME:
    DATABASES["default"].setdefault("TEST", {})["NAME"] = DATABASE_TEST_NAME
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {})
    if not DATABASE_TRANSACTION_POOLER:
        DATABASES["default"]["OPTIONS"]["options"] = f"-c lock_timeout={DATABASE_LOCK_TIMEOUT_MS}"
    DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", DATABASE_CONNECT_TIMEOUT_SECONDS)
    if DATABASE_PREPARED_STATEMENTS and not DATABASE_TRANSACTION_POOLER:
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5
    if DATABASE_POOL_MAX_SIZE > 0:
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_MAX_SIZE,
            "timeout": DATABASE_POOL_TIMEOUT_SECONDS,
        }
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them instead
# Services own their transactions; a refund never commits inside an outer one.
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# An optional streaming replica (PostgreSQL hot standby) for reads that may be a moment
# behind: the admin's charge and refund lists and the API's GETs of charges, refunds and
# events (ledger_app/replica.py). Nothing that moves money, locks or authenticates reads
# it, and no router sends other reads there. Its sessions are read-only (a standby takes
# its schema from the primary: never migrate it), and tests mirror the default database.
# It is reached directly, never through a transaction pooler: its read-only option is sent
# at connect (docs/operating/high-availability.md).
_replica = env.database(
    "DATABASE_REPLICA_URL", "", conn_max_age=DATABASE_CONN_MAX_AGE, conn_health_checks=True
)
if _replica:
    DATABASES["replica"] = _replica
    if _replica["ENGINE"] == "django.db.backends.postgresql":
        replica_options = _replica.setdefault("OPTIONS", {})
        # A replica that does not answer costs a request seconds, not the OS's timeout.
        replica_options.setdefault("connect_timeout", 3)
        # The primary's session options (lock_timeout) unless the URL gives its own, and
        # read-only: a replica URL that names the primary by mistake still writes nothing.
        primary_session = DATABASES["default"].get("OPTIONS", {}).get("options", "")
        session = replica_options.get("options") or primary_session
        replica_options["options"] = f"{session} -c default_transaction_read_only=on".strip()
    _replica["ATOMIC_REQUESTS"] = False
    _replica["TEST"] = {"MIRROR": "default"}

# === Web hardening and the client's address (docs/operating/production.md) =============
# Behind a TLS proxy that sets X-Forwarded-Proto: Django then knows a request came in over
# HTTPS (needed by the SSL redirect and secure cookies).
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env.switch("DJANGO_BEHIND_TLS_PROXY", False) else None
)
SECURE_SSL_REDIRECT = env.switch("DJANGO_SECURE_SSL_REDIRECT", False)
# Load balancers and scrapers probe the processes directly over plain HTTP, inside the
# network: a redirect to HTTPS would read as "down" (serving/health.py, /metrics).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.count(
    "DJANGO_SECURE_HSTS_SECONDS", 0, of="seconds", low=0, high=2 * 366 * 86_400
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.switch("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env.switch("DJANGO_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env.switch("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_TRUSTED_ORIGINS = env.names("DJANGO_CSRF_TRUSTED_ORIGINS")
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
# A staff session lasts a working day at most (seconds).
SESSION_COOKIE_AGE = env.count(
    "DJANGO_SESSION_SECONDS", 12 * 3600, of="seconds", low=60, high=30 * 86_400
)
X_FRAME_OPTIONS = "DENY"
# Proxies in front of gunicorn that each append to X-Forwarded-For the address they got
# the request from (0: none, REMOTE_ADDR is the client). The client's address is the entry
# this many places from the right (serving/client_address.py); login lockouts, the API's
# failed-authentication limit and the logs count and name clients by it. Behind a TLS proxy
# it must be at least 1, or every client would share the proxy's address.
TRUSTED_PROXY_COUNT = env.count(
    "DJANGO_TRUSTED_PROXY_COUNT",
    0,
    of="proxies in front that append to X-Forwarded-For",
    low=0,
    high=16,
)
if SECURE_PROXY_SSL_HEADER and not TRUSTED_PROXY_COUNT:
    raise ImproperlyConfigured(
        "DJANGO_BEHIND_TLS_PROXY=true needs DJANGO_TRUSTED_PROXY_COUNT (1 for one proxy): "
        "with 0 every client would share the proxy's address for lockouts and limits"
    )
# Login lockouts and the API's failed-authentication limit count an IPv6 client by its
# network of this many bits (serving/client_address.py: counted_address): one host gets
# a whole /64 and can take a new address in it at will. 128 counts each address alone.
CLIENT_IPV6_PREFIX_LENGTH = env.count(
    "DJANGO_CLIENT_IPV6_PREFIX_LENGTH", 64, of="bits of an IPv6 client's network", high=128
)

# Content Security Policy (django-csp) on every response: the admin and the API docs load
# scripts and styles from this site only, and nothing may frame them.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# === Admin sign-in and the second factor ===============================================
# django-axes locks an address out after LOGIN_FAILURE_LIMIT failed attempts, whatever user
# names they tried, for LOGIN_LOCKOUT_MINUTES (shared by every process: the attempts are
# rows in the database). Failures are logged without the password.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.count("LOGIN_FAILURE_LIMIT", 5, of="failed sign-ins", high=1_000)
AXES_COOLOFF_TIME = timedelta(
    minutes=env.number("LOGIN_LOCKOUT_MINUTES", 15, of="minutes", high=525_600)
)
# The address only, never the user name on its own: a user name locks from anywhere, so a
# stranger who knows it could keep its owner out. The address is the client's own
# (serving/client_address.py), which no header it writes can change.
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_RESET_ON_SUCCESS = True
# Axes masks the user name and address in its log lines by default; operators need them to
# see who is being guessed at and from where. The password is never in them.
AXES_SENSITIVE_PARAMETERS: list[str] = []
# No start-up banner on every command's stderr; failures still name the user and address
# (AXES_CLIENT_STR_CALLABLE, since axes alone names only what the lock counts).
AXES_VERBOSE = False
AXES_CLIENT_STR_CALLABLE = "ledger_app.admin.sign_in.attempt_str"
AXES_ENABLE_ADMIN = False  # the admin shows failed attempts read-only (admin/sign_in.py)
AXES_LOCKOUT_CALLABLE = "ledger_app.admin.sign_in.locked_out"
# The client as the lockout counts it: its address, or its IPv6 network (counted_address).
AXES_CLIENT_IP_CALLABLE = "serving.client_address.counted_address"

# A second factor (TOTP, django-otp) for every admin write and every page that moves money,
# asked again after ADMIN_OTP_IDLE_MINUTES without one. Only the development and demo
# mode (DJANGO_DEBUG=true) may switch it off.
ADMIN_OTP_REQUIRED = env.switch("ADMIN_OTP_REQUIRED", True)
if not ADMIN_OTP_REQUIRED and not DEBUG:
    raise ImproperlyConfigured(
        "ADMIN_OTP_REQUIRED=false is only for DJANGO_DEBUG=true demos: production asks "
        "everyone who moves money for a second factor"
    )
ADMIN_OTP_IDLE_MINUTES = env.number("ADMIN_OTP_IDLE_MINUTES", 5, of="minutes", high=1_440)
OTP_TOTP_ISSUER = env.text("ADMIN_OTP_ISSUER", "Refund back office")

# === The payment provider ==============================================================
# `simulated` keeps its own tables in this database and behaves by the charge's metadata
# (simulate_refund / simulate_charge); `stripe` uses the official client against
# STRIPE_API_BASE (default: Stripe itself) with STRIPE_API_KEY.
LEDGER_GATEWAY = env.choice("LEDGER_GATEWAY", "simulated", ("simulated", "stripe"))
STRIPE_API_BASE = env.url("STRIPE_API_BASE")
if LEDGER_GATEWAY == "stripe" and not STRIPE_API_KEY:
    raise ImproperlyConfigured("LEDGER_GATEWAY=stripe needs STRIPE_API_KEY")
GATEWAY_TIMEOUT_SECONDS = env.number("GATEWAY_TIMEOUT_SECONDS", 10, of="seconds", high=600)
SIMULATED_GATEWAY_LATENCY_MS = env.count(
    "SIMULATED_GATEWAY_LATENCY_MS", 200, of="milliseconds", low=0, high=600_000
)
# The simulated card network gives a succeeded refund's reference (ARN) this many seconds
# after the refund was made, as real networks take a while; 0: at once, in its answer.
SIMULATED_ARN_DELAY_SECONDS = env.count(
    "SIMULATED_ARN_DELAY_SECONDS", 60, of="seconds", low=0, high=30 * 86_400
)
# The simulated provider pays a balance transaction out this many days after the day it was
# made (UTC), in its daily payout, as Stripe's standard schedule does.
SIMULATED_PAYOUT_DELAY_DAYS = env.count("SIMULATED_PAYOUT_DELAY_DAYS", 2, of="days", low=0, high=30)
# Where the simulated provider sends its webhooks (advance_simulated_provider,
# simulate_dispute), signed with STRIPE_WEBHOOK_SECRET, as Stripe sends them: the server
# `make run` serves (GUNICORN_BIND, gunicorn.conf.py's address).
GUNICORN_BIND = env.text("GUNICORN_BIND", "127.0.0.1:8000")
SIMULATED_PROVIDER_WEBHOOK_URL = env.url(
    "SIMULATED_PROVIDER_WEBHOOK_URL", f"http://{GUNICORN_BIND}/webhooks/stripe"
)
# The simulated provider loses every webhook it would send (its news then reaches the back
# office only through sync_provider), as a provider that cannot reach it does.
SIMULATED_PROVIDER_LOSE_WEBHOOKS = env.switch("SIMULATED_PROVIDER_LOSE_WEBHOOKS", False)
# gunicorn.conf.py's processes and threads per process, read here so that a bad value
# stops gunicorn with the same one line as any other setting.
WEB_CONCURRENCY = env.count("WEB_CONCURRENCY", 2, of="processes", high=64)
GUNICORN_THREADS = env.count("GUNICORN_THREADS", 32, of="threads", high=256)

# === Refunds ===========================================================================
# inline: create_refund sends the refund right after it commits (staff see the final
# status at once). worker: refunds wait, pending, for `manage.py process_refunds`.
REFUND_DISPATCH = env.choice("REFUND_DISPATCH", "inline", ("inline", "worker"))
# Inline mode waits for the provider at most this long (seconds); past it the refund (or
# charge) is answered `pending` and this process's send pool, REFUND_SEND_THREADS threads,
# finishes it. 0: the caller sends in its own thread and waits for the answer.
REFUND_INLINE_WAIT_SECONDS = env.number(
    "REFUND_INLINE_WAIT_SECONDS", 2, of="seconds", high=600, zero=True
)
REFUND_SEND_THREADS = env.count("REFUND_SEND_THREADS", 16, of="threads", high=512)
# A refund over its requester's limit waits this long for another person's approval; then
# it is canceled and its amount released (`process_refunds` expires them).
APPROVAL_EXPIRY_HOURS = env.number("APPROVAL_EXPIRY_HOURS", 72, of="hours", high=8_784)
# A requester with refund limits in some currencies refunding in another: approve (every
# such refund waits for approval) or allow (it goes through unlimited, as before).
REFUND_LIMIT_OTHER_CURRENCIES = env.choice(
    "REFUND_LIMIT_OTHER_CURRENCIES", "approve", ("approve", "allow")
)
# The admin's refund form and bulk action warn about, and do not make without a tick, a
# refund of a charge for the same amount as a live refund of it made this many days ago.
REFUND_REPEAT_WINDOW_DAYS = env.number("REFUND_REPEAT_WINDOW_DAYS", 7, of="days", high=36_500)
# How long a dispatcher holds a claimed refund; after that a crashed one's work is retried.
REFUND_DISPATCH_LEASE_SECONDS = env.count(
    "REFUND_DISPATCH_LEASE_SECONDS", 60, of="seconds", high=86_400
)
# The reconciler asks the provider again about refunds that succeeded this recently, in
# case a later failure's webhook never arrived (0: it does not).
RECONCILE_RECHECK_HOURS = env.count("RECONCILE_RECHECK_HOURS", 72, of="hours", low=0, high=8_784)
# sync_provider: how often the worker walks the provider's objects for what its webhooks
# missed, and how far back each run starts before where the last one ended (the overlap).
PROVIDER_SYNC_INTERVAL = env.count("PROVIDER_SYNC_INTERVAL", 600, of="seconds", low=1, high=86_400)
# close_books (and the worker, daily after the sync) closes each day not closed yet, this
# many days back at most (docs/operating/books.md).
BOOKS_CLOSE_DAYS = env.count("BOOKS_CLOSE_DAYS", 35, of="days", low=1, high=3_660)
# The largest amount (minor units) a charge may have, created or imported, per currency:
# Stripe's maxima by default (eight digits; twelve for IDR). AMOUNT_CEILINGS overrides
# some, e.g. "usd=5000000,jpy=1000000"; AMOUNT_CEILING_DEFAULT the rest.
AMOUNT_CEILING_DEFAULT = env.count(
    "AMOUNT_CEILING_DEFAULT", 99_999_999, of="minor units", high=999_999_999_999
)
AMOUNT_CEILINGS = {"idr": 999_999_999_999, **env.amounts("AMOUNT_CEILINGS")}

# === Retention =========================================================================
# What expires, and after how many days (`manage.py purge_expired`, which the refund worker
# runs once a day; docs/operating/retention.md), each from 1 to 36500 (a century). Charges,
# refunds, ledger entries and the admin's log are never removed, nor anything a refund in
# doubt or awaiting approval needs.
# Events and their webhook deliveries (Stripe keeps events 30 days); a delivery still
# pending or retrying is kept, and so is its event.
EVENT_RETENTION_DAYS = env.count("EVENT_RETENTION_DAYS", 30, of="days", high=36_500)
# Events the provider sent: their effect is in the ledger, the id is kept so that a late
# duplicate (a retry, a resend from the provider's dashboard) is still refused.
PROVIDER_EVENT_RETENTION_DAYS = env.count(
    "PROVIDER_EVENT_RETENTION_DAYS", 90, of="days", high=36_500
)
# Idempotency keys whose refund or charge is final: within this a bulk file re-run or a
# client's retry replays; after it the same key is a new request. A quarter, so that a
# month-end or quarter-end file run again by mistake still replays (Stripe keeps 24 h).
IDEMPOTENCY_KEY_RETENTION_DAYS = env.count(
    "IDEMPOTENCY_KEY_RETENTION_DAYS", 90, of="days", high=36_500
)
# Admin sign-in records (django-axes: failed attempts, access logs); never one whose
# lockout (LOGIN_LOCKOUT_MINUTES) is still running.
LOGIN_RECORD_RETENTION_DAYS = env.count("LOGIN_RECORD_RETENTION_DAYS", 90, of="days", high=36_500)
# The simulated provider's log of the requests it received.
SIMULATED_PROVIDER_LOG_DAYS = env.count("SIMULATED_PROVIDER_LOG_DAYS", 7, of="days", high=36_500)

# === The REST API (/v1/): Stripe's wire format, API keys, Stripe's error envelope =======
# Requests per API key, e.g. 100/second or 5000/minute; both API limits are fixed windows
# counted in the database by every process and machine (ledger_app/operations/rate_counters.py).
API_RATE_LIMIT = env.rate("API_RATE_LIMIT", "100/second")
# Failed API authentications per client address (wrong or revoked keys); past it the
# address is answered 429 until the period ends.
API_AUTH_FAILURE_LIMIT = env.rate("API_AUTH_FAILURE_LIMIT", "20/minute")
# The account's default Stripe API version (ledger_app/api_versions): what new API keys
# answer in, and webhook endpoints created without `api_version` render events in. Empty:
# the newest published version the server knows. A version it does not know stops start-up.
DEFAULT_API_VERSION = env.choice(
    "DEFAULT_API_VERSION",
    "",
    ("", *published.PUBLISHED),
    wanted=f"a published Stripe API version such as {published.PUBLISHED[-1]}, or empty",
)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["ledger_app.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["ledger_app.api.authentication.ApiKeyPermission"],
    "DEFAULT_PARSER_CLASSES": [
        "rest_framework.parsers.FormParser",
        "ledger_app.api.parsing.JSONParser",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_THROTTLE_CLASSES": ["ledger_app.api.authentication.ApiKeyThrottle"],
    "EXCEPTION_HANDLER": "ledger_app.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Refund back office API",
    "DESCRIPTION": (
        "Charges and refunds in Stripe's wire format: form-encoded bodies with bracket "
        "notation (or JSON), API keys as Bearer tokens, Stripe's error envelope."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ledger_app.api.schema.optional_expansions",
        "ledger_app.api.schema.fields_left_out",
    ],
}
# Bodies are small; anything larger is refused before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
DATA_UPLOAD_MAX_NUMBER_FIELDS = 200

# === Outbound webhooks (`manage.py deliver_webhooks`) ==================================
# Endpoints on loopback, private, link-local or reserved addresses are refused unless this
# is true (demo and tests only).
WEBHOOK_ALLOW_PRIVATE_URLS = env.switch("WEBHOOK_ALLOW_PRIVATE_URLS", False)
# An egress proxy every delivery goes through (Stripe's Smokescreen, say: it then judges
# the addresses names resolve to); empty sends straight to the checked address.
# See docs/operating/egress.md.
WEBHOOK_PROXY_URL = env.url("WEBHOOK_PROXY_URL")
# The most one delivery request may take, all told: connect, send, and every byte of the
# answer read (a receiver that trickles its answer is cut off then: egress.post).
WEBHOOK_TIMEOUT_SECONDS = env.number("WEBHOOK_TIMEOUT_SECONDS", 10, of="seconds", high=3_600)
# A delivery is retried with backoff until it is this old, then marked failed.
WEBHOOK_RETRY_HOURS = env.number("WEBHOOK_RETRY_HOURS", 72, of="hours", high=8_784)
# The first retry's delay; each next one doubles, up to the maximum (with some jitter).
WEBHOOK_BACKOFF_SECONDS = env.number("WEBHOOK_BACKOFF_SECONDS", 60, of="seconds", high=86_400)
WEBHOOK_BACKOFF_MAX_SECONDS = env.number(
    "WEBHOOK_BACKOFF_MAX_SECONDS", 3600, of="seconds", high=7 * 86_400
)
# How long a worker holds the deliveries it claimed; a dead worker's are sent again after.
WEBHOOK_LEASE_SECONDS = env.count("WEBHOOK_LEASE_SECONDS", 120, of="seconds", high=86_400)
# A lease outlasts one whole request by this much at least (time to render the body and
# record the outcome), so that no other lane or worker takes a delivery still being sent.
WEBHOOK_LEASE_MARGIN_SECONDS = 1.0
if not WEBHOOK_TIMEOUT_SECONDS <= WEBHOOK_LEASE_SECONDS - WEBHOOK_LEASE_MARGIN_SECONDS:
    raise ImproperlyConfigured(
        "WEBHOOK_TIMEOUT_SECONDS must be above 0 and at least "
        f"{WEBHOOK_LEASE_MARGIN_SECONDS:g} s below WEBHOOK_LEASE_SECONDS"
    )
# How many deliveries one deliver_webhooks process has in flight at most: lanes (threads),
# each claiming batches of its own and holding a database connection of its own (given
# back to a DATABASE_POOL_MAX_SIZE pool while it waits on a receiver). PostgreSQL only;
# SQLite runs one. --threads overrides it.
WEBHOOK_DELIVERY_THREADS = env.count("WEBHOOK_DELIVERY_THREADS", 8, of="lanes", high=64)
# How many webhook endpoints one API key may have, and how many there may be in all
# (ledger_app/events/endpoints.py). Every event is written once per endpoint that wants it,
# in the transaction of its refund or charge, so these bound that work. Disabled endpoints
# count, deleted ones do not. Stripe allows 16 per account.
WEBHOOK_ENDPOINTS_PER_KEY = env.count(
    "WEBHOOK_ENDPOINTS_PER_KEY", 16, of="webhook endpoints", high=10_000
)
WEBHOOK_ENDPOINTS_TOTAL = env.count(
    "WEBHOOK_ENDPOINTS_TOTAL", 32, of="webhook endpoints", high=10_000
)

# === Customer mails (`manage.py send_customer_mails`, docs/customer-mails.md) ===========
# on: each change of a refund a customer cares about (made, succeeded, failed, its trace
# number) writes a mail to the refund's address with the change; off: none are written
# (ones already written are still sent by a running sender).
REFUND_EMAILS = env.switch("REFUND_EMAILS", True)
# Where the links in the mails point: the status pages are served under this address.
# In production send_customer_mails sends nothing until it is an https:// one, and
# `check --deploy` warns (ledger_app.W270) while REFUND_EMAILS is on.
REFUND_STATUS_BASE_URL = env.url(
    "REFUND_STATUS_BASE_URL", "http://127.0.0.1:8000" if DEBUG else ""
).rstrip("/")
# A status page link works this long after its mail was sent.
REFUND_STATUS_LINK_DAYS = env.count("REFUND_STATUS_LINK_DAYS", 90, of="days", high=3_660)
# Status pages one client address may open per minute.
REFUND_STATUS_PAGES_PER_MINUTE = env.count(
    "REFUND_STATUS_PAGES_PER_MINUTE", 30, of="pages", high=100_000
)
# When a customer may expect the money on their statement: business days after the refund
# is made, from the first to the last (Stripe says 5 to 10 for cards).
REFUND_ARRIVAL_DAYS_FROM = env.count("REFUND_ARRIVAL_DAYS_FROM", 5, of="business days", high=90)
REFUND_ARRIVAL_DAYS_TO = env.count("REFUND_ARRIVAL_DAYS_TO", 10, of="business days", high=90)
if REFUND_ARRIVAL_DAYS_TO < REFUND_ARRIVAL_DAYS_FROM:
    raise ImproperlyConfigured("REFUND_ARRIVAL_DAYS_TO must not be below REFUND_ARRIVAL_DAYS_FROM")
# Who the mails are from; bounces come back to it (or to the server's envelope rewriting).
DEFAULT_FROM_EMAIL = env.text("REFUND_EMAIL_FROM", "refunds@localhost")
# The SMTP server, as Django's SMTP backend reads it. TLS: STARTTLS on a plain port
# (EMAIL_USE_TLS) or TLS from the start (EMAIL_USE_SSL), not both.
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = env.text("EMAIL_HOST", "localhost")
EMAIL_PORT = env.count("EMAIL_PORT", 25, of="port", high=65_535)
EMAIL_HOST_USER = env.text("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env.text("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.switch("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env.switch("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be on")
EMAIL_TIMEOUT = env.number("EMAIL_TIMEOUT_SECONDS", 30, of="seconds", high=600)
# A mail the SMTP server refuses for now (4xx, no connection) is tried again with backoff
# until it is this old, then marked refused.
REFUND_EMAIL_RETRY_HOURS = env.number("REFUND_EMAIL_RETRY_HOURS", 48, of="hours", high=8_784)
# How long a sender holds the mails it claimed; one handed over and not answered by then
# is marked unknown (it may have gone) rather than sent again. At least 5 x EMAIL_TIMEOUT
# (MAIL, RCPT, DATA, the message and the server's answer may each take that long) and 1 s.
REFUND_EMAIL_LEASE_SECONDS = env.count("REFUND_EMAIL_LEASE_SECONDS", 180, of="seconds", high=86_400)
if REFUND_EMAIL_LEASE_SECONDS < 5 * EMAIL_TIMEOUT + 1:
    raise ImproperlyConfigured(
        "REFUND_EMAIL_LEASE_SECONDS must be at least 5 x EMAIL_TIMEOUT_SECONDS + 1 s"
    )
# Where a deployment's own mail and status page templates are (customer_mail/*.txt,
# *.html, status_page/refund.html): found before the shipped ones.
REFUND_EMAIL_TEMPLATES_DIR = env.text("REFUND_EMAIL_TEMPLATES_DIR", "")
if REFUND_EMAIL_TEMPLATES_DIR:
    TEMPLATES[0]["DIRS"] = [Path(REFUND_EMAIL_TEMPLATES_DIR), BASE_DIR / "templates"]
# The languages the mails and status pages are written in; a charge's metadata `locale`
# picks one (its first two letters), else the first.
LANGUAGES = [("en", "English"), ("de", "Deutsch")]
LOCALE_PATHS = [BASE_DIR / "locale"]

# === Logs, metrics and caches ==========================================================
# Log lines on stderr: plain text, or one JSON object per line with LOG_FORMAT=json. Each
# names its request, API key prefix, staff member, refund and charge when known, and
# secret-shaped text is redacted (serving/logs.py, docs/operating/health-and-logs.md).
LOG_FORMAT = env.choice(
    "LOG_FORMAT", "plain", ("plain", "json"), fold=str.lower, empty_is_default=True
)
LOG_LEVEL = env.choice(
    "LOG_LEVEL", "INFO", environment.LOG_LEVELS, fold=str.upper, empty_is_default=True
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "serving.request_id.RequestIdFilter"},
        "context": {"()": "serving.logs.LogContextFilter"},
        "redact": {"()": "serving.logs.RedactSecretsFilter"},
    },
    "formatters": {
        "plain": {"()": "serving.logs.PlainFormatter"},
        "json": {"()": "serving.logs.JsonLinesFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id", "context", "redact"],
            "formatter": LOG_FORMAT,
        }
    },
    # Django's own handlers off (its console copy in debug mode, runserver's line format):
    # its lines reach the root's handler like every other, in the one format and level.
    "loggers": {
        "django": {"handlers": [], "level": LOG_LEVEL},
        "django.server": {"handlers": [], "level": LOG_LEVEL, "propagate": True},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
LOGGING_CONFIG = "serving.logs.configure"

# GET /metrics for Prometheus (docs/operating/metrics.md), behind METRICS_TOKEN (above).
# Several gunicorn workers add up their counters when PROMETHEUS_MULTIPROC_DIR names a
# directory: prometheus_client reads that variable itself, before any metric exists
# (`make run` and production set it, and gunicorn.conf.py empties it at start), so the
# settings do not.

# Caches: per-process memory for what may differ between processes, and a table in the
# database for what every process and machine must share (made by migration 0013). The
# API's rate limits do not use either: a cache's incr is a read then a write, so they
# count in their own table with one atomic statement (ledger_app/operations/rate_counters.py).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "shared": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "shared_cache",
    },
}
