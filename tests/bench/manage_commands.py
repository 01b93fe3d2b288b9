"""The project's own manage.py commands as the bench runs them, each in a process of its
own on the database it is given: timed with their peak memory, bulk_refund over a file of
spread charges, and an API key for the HTTP phases."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from databases import (
    SPREAD_CHARGES,
)

ROOT = Path(__file__).resolve().parents[2]


# Runs a command as its only child, then prints that child's peak RSS: the bench's own
# RUSAGE_CHILDREN would also count gunicorn's workers and every earlier command.
PEAK_RSS = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:]); "
    "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
    "file=sys.stderr)"
)


def timed_subprocess(args, url) -> tuple[float, int, str]:
    """Seconds and peak RSS (KB) of a manage.py command."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": url},
    )
    elapsed = time.perf_counter() - began
    peak = int(done.stderr.rsplit("peak_rss_kb", 1)[1].split()[0])
    return elapsed, peak, done.stdout + done.stderr


def bulk_has_jobs(url: str) -> bool:
    """Whether bulk_refund takes --jobs yet (it is being added alongside this bench)."""
    shown = subprocess.run(
        [sys.executable, "manage.py", "bulk_refund", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": url},
    )
    return "--jobs" in shown.stdout


def bulk_rows_per_second(url: str, rows: int, workdir: Path, jobs: int | None = None) -> float:
    """`manage.py bulk_refund` over `rows` rows of spread charges, worker mode: rows/s.
    `jobs` None runs it without --jobs (one process, as before --jobs existed)."""
    path = workdir / f"bench-bulk-{jobs or 0}.csv"
    offset = 0 if jobs is None else SPREAD_CHARGES // 2  # other charges than the first run
    # An amount no other phase refunds, one per run: the rows are new refunds, so the repeat
    # check (same charge, same amount, another batch) runs for each and finds none.
    amount = 2 if jobs is None else 3
    with path.open("w") as handle:
        handle.write("charge,amount,reason,note\n")
        for n in range(rows):
            handle.write(f"ch_{1 + (offset + n) % SPREAD_CHARGES:020d},{amount},duplicate,\n")
    command = [sys.executable, "manage.py", "bulk_refund", str(path)]
    command += ["--batch-id", uuid.uuid4().hex]
    if jobs is not None:
        command += ["--jobs", str(jobs)]
    env = {**os.environ, "DATABASE_URL": url, "REFUND_DISPATCH": "worker"}
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"bulk_refund exited {done.returncode}:\n{done.stderr[-2000:]}")
    return rows / elapsed


def api_key(url: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", "create_api_key", "bench"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": url},
    ).stdout.strip()
