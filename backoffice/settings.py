"""Settings for the refund back office, read from the environment (one module, no forks)."""

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


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


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or local_secret_key()
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if host.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "ledger_app",
    "simulated_provider",
]

MIDDLEWARE = [
    "backoffice.request_id.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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

# The embedded default is a SQLite file. PostgreSQL (production) comes in through
# DATABASE_URL, e.g. postgres://root@127.0.0.1:5432/test.
DEFAULT_DATABASE_URL = f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
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
if os.environ.get("DATABASE_TEST_NAME"):  # lets parallel test runs share one server
    DATABASES["default"].setdefault("TEST", {})["NAME"] = os.environ["DATABASE_TEST_NAME"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A request never queues forever behind a row lock: past this it is refused with
    # 409 (lock_timeout / idempotency_key_in_use) and the client retries with its key.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        f"-c lock_timeout={int(os.environ.get('DATABASE_LOCK_TIMEOUT_MS', '5000'))}"
    )
    # Django's psycopg pool, per process: threads share DATABASE_POOL_MAX_SIZE connections
    # and hand them back between transactions (and while waiting on the provider), instead
    # of each thread keeping its own. 0: no pool, a persistent connection per thread.
    _pool_size = int(os.environ.get("DATABASE_POOL_MAX_SIZE", "0"))
    if _pool_size > 0:
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": _pool_size,
            "timeout": float(os.environ.get("DATABASE_POOL_TIMEOUT_SECONDS", "10")),
        }
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them instead
# Services own their transactions; a refund never commits inside an outer one.
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# An optional streaming replica (PostgreSQL hot standby) for reads that may be a moment
# behind: the admin's charge and refund lists and the API's GETs of charges, refunds and
# events (ledger_app/replica.py). Nothing that moves money, locks or authenticates reads
# it, and no router sends other reads there. Its sessions are read-only (a standby takes
# its schema from the primary: never migrate it), and tests mirror the default database.
if os.environ.get("DATABASE_REPLICA_URL"):
    DATABASES["replica"] = dj_database_url.parse(
        os.environ["DATABASE_REPLICA_URL"],
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
    if DATABASES["replica"]["ENGINE"] == "django.db.backends.postgresql":
        replica_options = DATABASES["replica"].setdefault("OPTIONS", {})
        # A replica that does not answer costs a request seconds, not the OS's timeout.
        replica_options.setdefault("connect_timeout", 3)
        # The primary's session options (lock_timeout) unless the URL gives its own, and
        # read-only: a replica URL that names the primary by mistake still writes nothing.
        primary_session = DATABASES["default"].get("OPTIONS", {}).get("options", "")
        session = replica_options.get("options") or primary_session
        replica_options["options"] = f"{session} -c default_transaction_read_only=on".strip()
    DATABASES["replica"]["ATOMIC_REQUESTS"] = False
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves STATIC_ROOT (filled by collectstatic, which `make run` runs).

# The payment provider. `simulated` keeps its own tables in this database and behaves
# by the charge's metadata (simulate_refund / simulate_charge); `stripe` uses the
# official client against STRIPE_API_BASE (default: Stripe itself).
LEDGER_GATEWAY = os.environ.get("LEDGER_GATEWAY", "simulated")
if LEDGER_GATEWAY not in {"simulated", "stripe"}:
    raise ImproperlyConfigured("LEDGER_GATEWAY must be simulated or stripe")
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE", "")
if LEDGER_GATEWAY == "stripe" and not STRIPE_API_KEY:
    raise ImproperlyConfigured("LEDGER_GATEWAY=stripe needs STRIPE_API_KEY")
# Signs the provider's webhooks to POST /webhooks/stripe (Stripe's whsec_...); without
# it every inbound webhook is refused.
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
GATEWAY_TIMEOUT_SECONDS = float(os.environ.get("GATEWAY_TIMEOUT_SECONDS", "10"))
SIMULATED_GATEWAY_LATENCY_MS = int(os.environ.get("SIMULATED_GATEWAY_LATENCY_MS", "200"))

# inline: create_refund sends the refund right after it commits (staff see the final
# status at once). worker: refunds wait, pending, for `manage.py process_refunds`.
REFUND_DISPATCH = os.environ.get("REFUND_DISPATCH", "inline")
if REFUND_DISPATCH not in {"inline", "worker"}:
    raise ImproperlyConfigured("REFUND_DISPATCH must be inline or worker")
# Inline mode waits for the provider at most this long (seconds); past it the refund (or
# charge) is answered `pending` and this process's send pool, REFUND_SEND_THREADS threads,
# finishes it. 0: the caller sends in its own thread and waits for the answer.
REFUND_INLINE_WAIT_SECONDS = float(os.environ.get("REFUND_INLINE_WAIT_SECONDS", "2"))
REFUND_SEND_THREADS = int(os.environ.get("REFUND_SEND_THREADS", "16"))
if REFUND_INLINE_WAIT_SECONDS < 0 or REFUND_SEND_THREADS < 1:
    raise ImproperlyConfigured("REFUND_INLINE_WAIT_SECONDS >= 0 and REFUND_SEND_THREADS >= 1")
# How long a dispatcher holds a claimed refund; after that a crashed one's work is retried.
REFUND_DISPATCH_LEASE_SECONDS = int(os.environ.get("REFUND_DISPATCH_LEASE_SECONDS", "60"))
# The reconciler asks the provider again about refunds that succeeded this recently, in
# case a later failure's webhook never arrived (0: it does not).
RECONCILE_RECHECK_HOURS = int(os.environ.get("RECONCILE_RECHECK_HOURS", "72"))

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "backoffice.request_id.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": "plain",
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# The REST API (/v1/): Stripe's wire format, API keys, Stripe's error envelope.
# Requests per API key, e.g. 100/second or 5000/minute (counted per web process).
API_RATE_LIMIT = os.environ.get("API_RATE_LIMIT", "100/second")
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
    ],
}
# Bodies are small; anything larger is refused before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
DATA_UPLOAD_MAX_NUMBER_FIELDS = 200

# Outbound webhooks (`manage.py deliver_webhooks`). Endpoints on loopback, private,
# link-local or reserved addresses are refused unless this is true (demo and tests only).
WEBHOOK_ALLOW_PRIVATE_URLS = env_bool("WEBHOOK_ALLOW_PRIVATE_URLS", False)
# Connect and read timeout of one delivery request.
WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("WEBHOOK_TIMEOUT_SECONDS", "10"))
# A delivery is retried with backoff until it is this old, then marked failed.
WEBHOOK_RETRY_HOURS = float(os.environ.get("WEBHOOK_RETRY_HOURS", "72"))
# The first retry's delay; each next one doubles, up to the maximum (with some jitter).
WEBHOOK_BACKOFF_SECONDS = float(os.environ.get("WEBHOOK_BACKOFF_SECONDS", "60"))
WEBHOOK_BACKOFF_MAX_SECONDS = float(os.environ.get("WEBHOOK_BACKOFF_MAX_SECONDS", "3600"))
# How long a worker holds the deliveries it claimed; a dead worker's are sent again after.
WEBHOOK_LEASE_SECONDS = int(os.environ.get("WEBHOOK_LEASE_SECONDS", "120"))
if not 0 < WEBHOOK_TIMEOUT_SECONDS < WEBHOOK_LEASE_SECONDS:
    raise ImproperlyConfigured("WEBHOOK_TIMEOUT_SECONDS must be above 0 and below the lease")
