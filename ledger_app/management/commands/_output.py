"""Shared bits of the commands' output: who is acting, and progress on a terminal."""

from __future__ import annotations

import getpass
import sys
import time


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


class Progress:
    """A one-line progress counter on stderr, only when stderr is a terminal."""

    def __init__(self, total: int | None = None, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.shown = 0.0

    def set_total(self, total: int) -> None:
        self.total = total

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.enabled and now - self.shown >= 0.2:
            self.shown = now
            rate = self.done / max(now - self.started, 1e-9)
            of = f"/{self.total:,}" if self.total else ""
            self.stream.write(f"\r{self.done:,}{of} rows  {rate:,.0f}/s ")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()
