"""Loaded by pytest before the settings (pyproject's `-p backoffice.pytest_defaults`): the
suite runs in production mode, as `make test` does, whatever the checkout holds.

- `.env` is not read (DJANGO_DOTENV=false): it holds the demo's switches (`make run`
  writes it), and the suite tests the configuration people deploy. Processes the tests
  start inherit this.
- Without DJANGO_SECRET_KEY, a throwaway key for this run, so that a plain `pytest` works
  in any checkout. It signs nothing that outlives the run.
"""

import os
import secrets

os.environ["DJANGO_DOTENV"] = "false"
os.environ.setdefault("DJANGO_SECRET_KEY", f"throwaway-{secrets.token_urlsafe(48)}")
# The https:// address the customer mails link to, which production's sender needs.
os.environ.setdefault("REFUND_STATUS_BASE_URL", "https://refunds.example.test")
