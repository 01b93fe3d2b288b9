"""Rows the running system keeps for itself: shared rate counters and job leases."""

from __future__ import annotations

from django.db import models


class RateCounter(models.Model):
    """What one key (an API key, a client address) used in one fixed window of a rate
    limit, counted here so that every process and machine shares one count
    (services/rate_counters.py). Rows are short-lived: windows that ended are purged."""

    pk = models.CompositePrimaryKey("key", "window_started_at")
    key = models.CharField(max_length=255)
    window_started_at = models.DateTimeField()
    window_ends_at = models.DateTimeField(db_index=True)  # the purge deletes by it
    count = models.PositiveIntegerField()

    class Meta:
        db_table = "ledger_app_ratecounter"  # named in rate_counters.py's one statement

    def __str__(self) -> str:
        return f"{self.key} {self.window_started_at:%Y-%m-%d %H:%M:%S}: {self.count}"


class JobLease(models.Model):
    """A job that one process at a time may run (purge_expired), whoever starts it: the
    process that claims the row with one conditional UPDATE holds it until `leased_until`,
    renews it while it works, and frees it when it ends; a process that dies leaves it to
    run out. `last_finished_at` is when a whole run last ended (the refund worker's daily
    schedule reads it). services/job_leases.py."""

    name = models.CharField(primary_key=True, max_length=64)
    holder = models.CharField(
        max_length=200, blank=True, help_text="host:pid:token of the process that holds it."
    )
    leased_until = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
