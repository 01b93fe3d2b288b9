# The two commands: `make run` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
AXE_CORE := ~4.14.1
AXE := $(VENV)/node/node_modules/axe-core/axe.min.js
# The client matrix's official stripe clients (tests/clients/), each from its lock file.
CLIENTS := $(VENV)/clients
NODE_CLIENTS := $(CLIENTS)/node/.installed
PYTHON_CLIENT_OLDER := $(CLIENTS)/python-stripe-older/.installed

.PHONY: run demo test test-ha ha-up ha-down bench-ha soak bench bench-quick bench-year worker reconcile purge backup-check messages lint format lock clean

# `make run`, `make worker`, `make reconcile` and `make purge` are the demo: development mode
# (DJANGO_DEBUG=true: a per-checkout secret key in .secret_key) with the admin's second
# factor off unless you set ADMIN_OTP_REQUIRED=true. Production never runs like this:
# see docs/operating/production.md.
DEMO_ENV = DJANGO_DEBUG=$${DJANGO_DEBUG:-true} ADMIN_OTP_REQUIRED=$${ADMIN_OTP_REQUIRED:-false}
# Soak and bench (and scripts/run-tests on its own) run in production mode with a throwaway
# secret key of their own, and read no `.env`.
THROWAWAY_KEY = DJANGO_DOTENV=false DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-throwaway-$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(48))')}

# Installs come from the lock files, every version pinned with its hashes, so a fresh
# machine next month gets what CI ran today; `make lock` refreshes them (docs/development.md, "Locked
# installs"). The project itself goes in editable, with nothing more (--no-deps).
$(VENV)/.installed: requirements/base.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements/base.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.installed-dev: requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements/dev.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@ $(VENV)/.installed

# The lock files from pyproject.toml's ranges: the newest versions they allow, for Python
# 3.11 on any platform, with hashes. Run it after changing a dependency in pyproject.toml,
# or to take new releases (then `make test`, and commit requirements/ and
# tests/clients/package-lock.json). It locks the client matrix's stripe clients too: the
# older Python major (requirements/clients/) and both Node majors (tests/clients/, npm).
# LOCK_DIR writes them all elsewhere (the test of this target does).
UV_VERSION := 0.13.9
LOCK_DIR ?= requirements
LOCK_VENV ?= $(VENV)-lock
LOCK_ARGS = --generate-hashes --universal --python-version 3.11 --quiet
NODE_LOCK_DIR = $(if $(filter requirements,$(LOCK_DIR)),tests/clients,$(LOCK_DIR)/clients/node)
lock:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet uv==$(UV_VERSION)
	mkdir -p $(LOCK_DIR)
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml requirements/build.in $(LOCK_ARGS) \
		--no-emit-package refund-backoffice -o $(LOCK_DIR)/base.txt
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml requirements/build.in --extra dev $(LOCK_ARGS) \
		--no-emit-package refund-backoffice -o $(LOCK_DIR)/dev.txt
	mkdir -p $(LOCK_DIR)/clients $(NODE_LOCK_DIR)
	$(LOCK_VENV)/bin/uv pip compile requirements/clients/stripe-python-older.in $(LOCK_ARGS) \
		-o $(LOCK_DIR)/clients/stripe-python-older.txt
	@command -v npm >/dev/null || { echo "npm not found: it locks the Node clients (tests/clients/)"; exit 1; }
	[ tests/clients -ef $(NODE_LOCK_DIR) ] || cp tests/clients/package.json $(NODE_LOCK_DIR)/
	rm -f $(NODE_LOCK_DIR)/package-lock.json
	cd $(NODE_LOCK_DIR) && npm install --package-lock-only --no-audit --no-fund --ignore-scripts --silent

# axe-core (npm) for the browser accessibility tests, tests/browser/test_accessibility.py.
# Its own target, so that a dev install made before it existed gets it too.
$(AXE):
	@if command -v npm >/dev/null; then \
		npm install --silent --no-audit --no-fund --prefix $(VENV)/node axe-core@$(AXE_CORE); \
	else echo "npm not found: the accessibility tests will skip (and fail under CI=true)"; fi

# The client matrix's stripe clients (tests/clients/test_client_matrix.py), from their
# locks: both Node majors with `npm ci` (integrity hashes), the older Python major with
# --require-hashes into a folder of its own (the newest is the project's own, in the venv).
$(NODE_CLIENTS): tests/clients/package.json tests/clients/package-lock.json
	@if command -v npm >/dev/null; then \
		rm -rf $(CLIENTS)/node && mkdir -p $(CLIENTS)/node && \
		cp tests/clients/package.json tests/clients/package-lock.json $(CLIENTS)/node/ && \
		(cd $(CLIENTS)/node && npm ci --silent --no-audit --no-fund --ignore-scripts) && touch $@; \
	else echo "npm not found: the Node clients of the client matrix will skip (and fail under CI=true)"; fi

$(PYTHON_CLIENT_OLDER): requirements/clients/stripe-python-older.txt $(VENV)/.installed-dev
	rm -rf $(@D)
	$(BIN)/pip install --quiet --require-hashes --no-deps --target $(@D) \
		-r requirements/clients/stripe-python-older.txt
	touch $@

# The demo's set-up, without serving: `.env` with the demo's switches (so that every
# `manage.py` command in this checkout runs as the demo server does; the environment wins
# over it), the database, static files and the demo data.
demo: $(VENV)/.installed
	@printf '%s\n' "# Written by make run: the demo's switches, read by every manage.py command in" \
		"# this checkout (the environment wins). Delete it for production mode's strictness." \
		"DJANGO_DEBUG=$${DJANGO_DEBUG:-true}" "ADMIN_OTP_REQUIRED=$${ADMIN_OTP_REQUIRED:-false}" \
		"WEBHOOK_ALLOW_PRIVATE_URLS=$${WEBHOOK_ALLOW_PRIVATE_URLS:-true}" \
		"STRIPE_WEBHOOK_SECRET=$${STRIPE_WEBHOOK_SECRET:-whsec_$$($(PYTHON) -c 'import secrets; print(secrets.token_hex(24))')}" \
		"REFUND_EMAILS=$${REFUND_EMAILS:-on}" "EMAIL_HOST=$${EMAIL_HOST:-127.0.0.1}" \
		"EMAIL_PORT=$${EMAIL_PORT:-$(DEMO_MAIL_PORT)}" \
		"REFUND_STATUS_BASE_URL=$${REFUND_STATUS_BASE_URL:-http://$${GUNICORN_BIND:-127.0.0.1:8000}}" > .env
	$(DEMO_ENV) $(BIN)/python manage.py migrate --noinput
	$(DEMO_ENV) $(BIN)/python manage.py collectstatic --noinput -v0
	$(DEMO_ENV) $(BIN)/python manage.py seed_demo

# Beside the server, a trickle of customers paying at the simulated provider's checkout
# (one every DEMO_PAYMENT_SECONDS, 60 by default; 0 for none): their charges arrive by
# webhook, as a real provider's do. It stops with the server.
# The customer mails go to a local SMTP sink (mail_sink, on DEMO_MAIL_PORT), which keeps
# each as a .eml file in demo-mail/; a sender (send_customer_mails) hands them over. Both
# stop with the server.
DEMO_PAYMENT_SECONDS ?= 60
DEMO_MAIL_PORT ?= 8025
run: demo
	@echo "Starting the demo server; it prints the address it serves on (GUNICORN_BIND) once it listens"
	@echo "Customer mails land in demo-mail/ (one .eml file each); each refund's page lists its mails"
	@$(DEMO_ENV) $(BIN)/python manage.py mail_sink --port $(DEMO_MAIL_PORT) & sink=$$!; \
	$(DEMO_ENV) $(BIN)/python manage.py send_customer_mails --loop >/dev/null & sender=$$!; \
	trickle=; trap 'kill $$sink $$sender $$trickle 2>/dev/null' EXIT INT TERM; \
	if [ "$(DEMO_PAYMENT_SECONDS)" != 0 ]; then \
		$(DEMO_ENV) $(BIN)/python manage.py simulate_payment --amount 2500 --currency usd \
			--description "A customer at the checkout" --every $(DEMO_PAYMENT_SECONDS) >/dev/null & \
		trickle=$$!; \
	fi; \
	$(DEMO_ENV) WEBHOOK_ALLOW_PRIVATE_URLS=$${WEBHOOK_ALLOW_PRIVATE_URLS:-true} \
	PROMETHEUS_MULTIPROC_DIR=$${PROMETHEUS_MULTIPROC_DIR:-$(CURDIR)/.prometheus} \
	$(BIN)/gunicorn -c gunicorn.conf.py backoffice.wsgi --access-logfile -

test: $(VENV)/.installed-dev $(AXE) $(NODE_CLIENTS) $(PYTHON_CLIENT_OLDER)
	scripts/run-tests

# The failover cluster (docs/operating/high-availability.md): etcd, Patroni over two
# PostgreSQL nodes with a synchronous standby, HAProxy and PgBouncer, from Debian's packages
# (apt-get install patroni etcd-server pgbouncer haproxy), on free loopback ports in a
# temporary directory. `make ha-up` prints the settings that point the back office at it.
ha-up: $(VENV)/.installed
	$(BIN)/python scripts/ha-cluster up

ha-down:
	$(BIN)/python scripts/ha-cluster down

# What RPO 0 costs: refund p50 and p99 with each commit waiting for the synchronous
# standby, and on the primary alone, in alternating rounds on a cluster of its own
# (tests/bench/ha_latency.py; docs/operating/high-availability.md).
bench-ha: $(VENV)/.installed-dev
	$(THROWAWAY_KEY) $(BIN)/python -W ignore tests/bench/ha_latency.py $(BENCH_ARGS)

# On a cluster of its own: the primary killed under load, the standby lost, and the API,
# admin and command tests through PgBouncer in transaction mode. .ci/run runs it after
# `make test`.
test-ha: $(VENV)/.installed-dev
	scripts/test-ha

# The reliability suites with soak sizes on PostgreSQL (about 35 minutes), and a summary
# of operations, faults injected and invariant checks. SOAK_ROUNDS=1 for a shorter one.
soak: $(VENV)/.installed-dev
	$(THROWAWAY_KEY) scripts/soak

# Needs a reachable PostgreSQL (BENCH_DATABASE_URL, default the local server); creates
# its own databases there. Prints a table and writes bench-results.json.
bench: $(VENV)/.installed-dev
	$(THROWAWAY_KEY) $(BIN)/python -W ignore tests/bench/run.py $(BENCH_ARGS)

# A smoke run of every phase (about two minutes): make test runs it, with
# BENCH_ARGS naming its server, its results file and --drop-databases. It fails when a
# phase fails or the books disagree, never on a ratio (those are for quiet runs).
bench-quick: $(VENV)/.installed-dev
	$(THROWAWAY_KEY) $(BIN)/python -W ignore tests/bench/run.py --quick $(BENCH_ARGS)

# A simulated year of refunds in a database of its own (tests/bench/year.py; docs/benchmarks.md,
# "Data that expires"): table sizes after loading, after purge_expired and after VACUUM, and
# the admin's event and delivery lists, the dashboard, verify_ledger and the restore drill
# before and after. 360,000 refunds by default (a tenth of issue 32's year; docs/benchmarks.md
# gives a run's time); YEAR_ARGS="--refunds 36000" for a smaller one. make test runs it at
# 500 (tests/ops/test_benchmarks_run.py).
bench-year: $(VENV)/.installed-dev
	$(THROWAWAY_KEY) $(BIN)/python -W ignore tests/bench/year.py $(YEAR_ARGS)

# The workers in a loop, side by side: refunds to the provider, webhooks to their
# endpoints (a slow receiver never holds up a refund), customer mails to the SMTP server. Ctrl-C or SIGTERM stops both; each
# finishes the refund or delivery in hand.
worker: $(VENV)/.installed
	@trap 'kill -TERM $$refunds $$webhooks $$mails 2>/dev/null; wait' INT TERM; \
	$(DEMO_ENV) $(BIN)/python manage.py process_refunds --loop & refunds=$$!; \
	$(DEMO_ENV) WEBHOOK_ALLOW_PRIVATE_URLS=$${WEBHOOK_ALLOW_PRIVATE_URLS:-true} \
	$(BIN)/python manage.py deliver_webhooks --loop & webhooks=$$!; \
	$(DEMO_ENV) $(BIN)/python manage.py send_customer_mails --loop & mails=$$!; \
	wait

reconcile: $(VENV)/.installed
	$(DEMO_ENV) $(BIN)/python manage.py reconcile

# What has expired, removed now rather than at the worker's daily run (docs/operating/
# retention.md); PURGE_ARGS=--dry-run counts it instead.
purge: $(VENV)/.installed
	$(DEMO_ENV) $(BIN)/python manage.py purge_expired $(PURGE_ARGS)

# The monthly restore drill (docs/operating/backups.md): dumps DATABASE_URL (PostgreSQL),
# restores it into a fresh database, checks counts, migrations and verify_ledger there.
backup-check: $(VENV)/.installed
	$(BIN)/python scripts/backup-check $(BACKUP_CHECK_ARGS)

# The customer mails' and status page's translations (locale/): their strings gathered
# into each language's django.po, and django.mo compiled from it; both are committed.
# Needs GNU gettext. tests/customer_mail/test_translations.py checks the two agree.
messages: $(VENV)/.installed
	scripts/mail-messages

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	DJANGO_DEBUG=true DJANGO_DOTENV=false $(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(VENV)-lock staticfiles .test-db.sqlite3* .pytest_cache .ruff_cache
