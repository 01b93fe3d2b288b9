"""Start-up refusal in one line: settings that cannot run production (no secret key, two
factors switched off outside the demo) and any environment variable with a bad value
(backoffice/environment.py names it and says what it must be) stop manage.py and gunicorn
with a sentence, not a traceback."""

from __future__ import annotations

import os
import sys


def settings_or_exit() -> None:
    """Load the settings; on a configuration error, print it on one line and exit 2."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backoffice.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS  # noqa: B018 - importing the settings module is the check
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
