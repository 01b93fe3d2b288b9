"""What every phase of a bench run shares: the run itself (its arguments, databases and
results, Run), and how samples become the figures it records (throughputs and their
medians, percentiles, ratios, where the CPU went)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from http_load import percentile_ms


def throughput(gathered, seconds) -> tuple[float, list[float]]:
    total = sum(g[0] for g in gathered)
    latencies = [lat for g in gathered for lat in g[1]]
    return total / seconds, latencies


def percentile(values, fraction) -> float:
    return percentile_ms(values, fraction)


def median_throughput(label, runs, make) -> dict:
    rates, latencies = [], []
    for _ in range(runs):
        rate, lats = make()
        rates.append(rate)
        latencies += lats
    result = {
        "per_second": statistics.median(rates),
        "runs": rates,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
    }
    print(
        f"  {label:<40} {result['per_second']:>9.0f}/s  p50 {result['p50_ms']:6.1f} ms  "
        f"p99 {result['p99_ms']:6.1f} ms",
        flush=True,
    )
    return result


def ratio(value: float, base: float) -> float:
    return value / base if base else 0.0


@dataclass
class Run:
    """What every phase of one bench run shares."""

    args: argparse.Namespace
    server: dict
    url: str = ""
    key: str = ""
    slow: list[str] = field(default_factory=list)
    workdir: Path = Path()
    results: dict = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    def section(self, title: str) -> None:
        """A phase's heading, with the time so far and the machine's 1-minute load average
        (above the core count, something else is sharing the machine)."""
        elapsed, load = time.perf_counter() - self.started, os.getloadavg()[0]
        print(f"{title}  [{elapsed:.0f} s, load {load:.1f}]", flush=True)


def cpu_text(cores: dict) -> str:
    if not cores:
        return "CPU not measured"
    return (
        f"CPU busy {cores['machine_busy_cores']:.2f} of {cores['machine_cores']} cores: "
        f"gunicorn {cores['gunicorn_cores']:.2f}, PostgreSQL (bench db) "
        f"{cores['postgres_cores']:.2f}, client {cores['client_cores']:.2f}, everything else "
        f"{cores['other_cores']:.2f}"
    )
