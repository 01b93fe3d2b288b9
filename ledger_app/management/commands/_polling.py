"""The base of the polling workers (process_refunds, deliver_webhooks): passes of work
until none is left (--once) or until stopped (--loop), stopping cleanly on a signal, and
going on after the database drops the connection (a restart, a failover, a terminated
backend): the pass is abandoned, the broken connection closed, and the next one tried
after a backoff."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection

from ledger_app.db import connection_lost
from ledger_app.management.commands._stopping import STOP_SECONDS, StopRequest
from ledger_app.worker_parts import ItemInHand, RunOutcomes

log = logging.getLogger("ledger_app.worker")

# After a pass the database interrupted, the next is tried this long after, doubling with
# each pass in a row that fails, up to the most; one pass that runs through starts over.
RETRY_FIRST_SECONDS = 1.0
RETRY_MOST_SECONDS = 30.0


def retry_after(failed_in_a_row: int) -> float:
    """Seconds before the next pass after `failed_in_a_row` interrupted passes (1 or more)."""
    return min(RETRY_FIRST_SECONDS * 2 ** min(failed_in_a_row - 1, 30), RETRY_MOST_SECONDS)


def _stop_seconds(options: dict[str, Any]) -> float:
    """--stop-seconds, else WORKER_STOP_SECONDS: more than 0 and at most an hour."""
    bound = options.get("stop_seconds")
    if bound is None:
        bound = float(getattr(settings, "WORKER_STOP_SECONDS", STOP_SECONDS))
    if not 0 < bound <= 3600:
        raise CommandError("--stop-seconds must be more than 0 and at most 3600")
    return bound


def _wait(stop: StopRequest, seconds: float) -> None:
    """Sleep `seconds` between passes, ending at once on a stop request."""
    deadline = time.monotonic() + seconds
    while not stop and time.monotonic() < deadline:
        time.sleep(0.05)


class PollingWorker(BaseCommand):
    """A worker command: one pass over what is due (`--once`, the default) or passes
    until SIGTERM/SIGINT (`--loop`), finishing the item in hand before it stops (see
    StopRequest; docs/operating/deploys.md)."""

    noun = "item"  # what one item is called in help and stop messages
    plural = "items"
    batch_default = 100
    poll_default = 2.0
    lease_help = "How long a claim holds."
    # What becomes of an item in hand if the worker exits without finishing it.
    left_in_hand = "it is taken up again when its lease runs out"
    # What holds the items in hand: ItemsInHand where several lanes send at once.
    hand_type: type[ItemInHand] = ItemInHand

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--once", action="store_true", help="Send what is due now, then exit (default)."
        )
        mode.add_argument(
            "--loop", action="store_true", help="Keep polling until SIGTERM or SIGINT."
        )
        parser.add_argument(
            "--batch-size", type=int, default=self.batch_default, help="How many per claim."
        )
        parser.add_argument("--lease-seconds", type=int, default=None, help=self.lease_help)
        parser.add_argument(
            "--poll-seconds",
            type=float,
            default=self.poll_default,
            help="Pause between polls with --loop.",
        )
        parser.add_argument(
            "--stop-seconds",
            type=float,
            default=None,
            help=(
                f"On SIGTERM/SIGINT, how long the {self.noun} in hand may take to finish "
                f"before the worker exits anyway, leaving it leased (default {STOP_SECONDS:g})."
            ),
        )

    def still_leased(self, pk: str | int) -> bool:
        """Whether the item that was in hand at the stop is still under this worker's
        lease after its send returned (a refund whose lookup got no answer)."""
        return False

    def run_passes(
        self, options: dict[str, Any], one_pass: Callable[..., RunOutcomes], **arguments: Any
    ) -> RunOutcomes:
        """One pass (`one_pass(batch_size=, lease_seconds=, should_stop=, hand=,
        **arguments)`), or passes until stopped with --loop; the summed tally. Stopped by a
        signal, it says what it finished and what it left leased, on stderr."""
        bound = _stop_seconds(options)
        hand = self.hand_type()
        total = RunOutcomes()
        nouns = (self.noun, self.plural)
        stop = StopRequest(self.stderr.write, nouns, hand, bound, self.left_in_hand)
        failed_in_a_row = 0
        with stop.handling():
            while True:
                try:
                    tally = one_pass(
                        batch_size=options["batch_size"],
                        lease_seconds=options["lease_seconds"],
                        should_stop=stop.__bool__,
                        hand=hand,
                        **arguments,
                    )
                except DatabaseError as exc:
                    if not connection_lost(exc):
                        raise
                    failed_in_a_row += 1
                    tally = self._pass_interrupted(failed_in_a_row, options["loop"])
                else:
                    failed_in_a_row = 0
                total.add_up(tally)
                if not options["loop"] or stop:
                    break
                pause = retry_after(failed_in_a_row) if failed_in_a_row else options["poll_seconds"]
                _wait(stop, pause)
            if stop:
                self._say_stopped(stop, tally)
        return total

    def _pass_interrupted(self, failed_in_a_row: int, looping: bool) -> RunOutcomes:
        """The database went away during a pass, outside any item (its first query, a
        claim, a read between items): what was in hand stays under its lease, as after a
        crash. The broken connection is closed so that the next pass opens a new one;
        only the connection's errors are survived this way, a bug in a query still ends
        the worker."""
        if looping:
            log.exception(
                "%s: pass interrupted by a database error (%d in a row); next in %g s",
                self.plural,
                failed_in_a_row,
                retry_after(failed_in_a_row),
            )
        else:
            log.exception("%s: pass interrupted by a database error", self.plural)
        try:
            connection.close()
        except DatabaseError:  # closing a connection the server already dropped
            log.debug("closing the broken connection failed", exc_info=True)
        return RunOutcomes(errors=1)

    def _say_stopped(self, stop: StopRequest, tally: RunOutcomes) -> None:
        # Of those in hand at the stop, any not finished stayed leased (its send raised);
        # one that finished may still be leased (a refund whose lookup got no answer).
        unfinished = max(0, stop.held_at_stop - stop.finished())
        left = tally.left_leased + unfinished
        if stop.held_pk is not None and not unfinished and self._leased(stop):
            left += 1
        parts = [f"{stop.count(stop.finished())} finished"]
        if tally.handed_back:
            parts.append(f"{tally.handed_back} claimed and handed back unsent")
        parts.append(f"{left} left leased")
        self.stderr.write("stopped: " + ", ".join(parts))

    def _leased(self, stop: StopRequest) -> bool:
        try:
            return self.still_leased(cast("str | int", stop.held_pk))  # only when held
        except DatabaseError:
            return True  # cannot tell; say the worse
