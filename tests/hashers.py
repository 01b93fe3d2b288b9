"""The password hasher the test process uses: Django's own PBKDF2 with fewer rounds.

Every test that makes a user with a password (pytest-django's admin_user included) would
otherwise spend about a quarter of a second on Django's 1,000,000 rounds, which proves
nothing about refunds. The algorithm, the stored format and every check of a password are
Django's; only the work factor is lower, and only in the test process: servers and
commands the tests start hash as configured, and verify these hashes, which carry their
own round count."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FewRoundsPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000
