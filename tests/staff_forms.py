"""What the admin's user change form posts, for tests that change who may do what."""

from __future__ import annotations


def user_change_form(user, *, groups=(), perms=(), staff=True, superuser=False) -> dict:
    """The user change form of `user` as posted, with the groups, permissions and statuses
    chosen (the user's name and dates as they are)."""
    form = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on",
        "groups": [g.pk for g in groups],
        "user_permissions": [p.pk for p in perms],
        "date_joined_0": "2025-01-02",
        "date_joined_1": "03:04:05",
        "last_login_0": "",
        "last_login_1": "",
    }
    if staff:
        form["is_staff"] = "on"
    if superuser:
        form["is_superuser"] = "on"
    return form
