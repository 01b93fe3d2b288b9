"""The bench's phases on the service and the database, without HTTP: the limit against
create_refund (throughput), single refunds and replays (single), bulk_refund (bulk), and
verify_ledger and the admin's changelists at two sizes (growth)."""

from __future__ import annotations

from databases import (
    BIG_DB,
    SMALL_DB,
    fresh_database,
    load_ledger,
)
from in_django import measure_in_django
from manage_commands import bulk_has_jobs, bulk_rows_per_second, timed_subprocess
from phases_common import Run, median_throughput, ratio, throughput
from workers import (
    raw_worker,
    run_processes,
    service_worker,
)


def measure_throughput(run: Run) -> None:
    """The limit and the service, spread over 100,000 charges and on one hot charge."""
    run.section("throughput")
    n, s, r, url = run.args.clients, run.args.seconds, run.args.repeats, run.url
    for shape, hot in [("spread", False), ("hot", True)]:
        limit = median_throughput(
            f"limit: raw SQL ({run.args.limit_shape}), {shape}",
            r,
            lambda hot=hot: throughput(
                run_processes(raw_worker, n, url, hot, s, tail=(run.args.limit_shape,)), s
            ),
        )
        run.results[f"limit_{shape}"] = limit
        for dispatch in ["worker", "inline"]:
            service = median_throughput(
                f"service: create_refund, {shape}, {dispatch}",
                r,
                lambda hot=hot, dispatch=dispatch: throughput(
                    run_processes(service_worker, n, url, hot, s, tail=(dispatch,)), s
                ),
            )
            service["ratio_to_limit"] = ratio(service["per_second"], limit["per_second"])
            run.results[f"service_{shape}_{dispatch}"] = service


def measure_single(run: Run) -> None:
    count = run.args.single_requests
    run.section(f"single requests (ms each, median of 3 x {count})")
    single = measure_in_django(run.url, "replay_and_growth", count)
    single["replay_ratio_to_create"] = ratio(single["replay_ms"], single["create_ms"])
    single["growth_ratio"] = ratio(single["10k_prior_refunds_ms"], single["no_prior_refunds_ms"])
    run.results["single"] = single
    for label, value in single.items():
        print(f"  {label:<40} {value:9.3f}", flush=True)


def measure_bulk(run: Run) -> None:
    """bulk_refund in one process and with --jobs 4, against the service's spread rate
    with --clients processes measured earlier in this run."""
    rows, url = run.args.bulk_rows, run.url
    run.section(f"bulk_refund, {rows:,} rows (worker mode)")
    service = run.results.get("service_spread_worker", {}).get("per_second", 0)
    bulk = {"rows": rows, "jobs_available": bulk_has_jobs(url)}
    # One process is the slow one: half the rows give its rate as well, in half the time.
    bulk["jobs_1_rows"] = rows // 2 if bulk["jobs_available"] else rows
    bulk["jobs_1_rows_per_second"] = bulk_rows_per_second(url, bulk["jobs_1_rows"], run.workdir)
    bulk["jobs_1_ratio_to_service"] = ratio(bulk["jobs_1_rows_per_second"], service)
    print(
        f"  one process ({bulk['jobs_1_rows']:,} rows): "
        f"{bulk['jobs_1_rows_per_second']:.0f} rows/s",
        flush=True,
    )
    if bulk["jobs_available"]:
        bulk["jobs_4_rows_per_second"] = bulk_rows_per_second(url, rows, run.workdir, 4)
        bulk["jobs_4_ratio_to_service"] = ratio(bulk["jobs_4_rows_per_second"], service)
        print(
            f"  --jobs 4: {bulk['jobs_4_rows_per_second']:.0f} rows/s = "
            f"{bulk['jobs_4_ratio_to_service']:.2f} of the service with {run.args.clients} "
            "clients",
            flush=True,
        )
    else:
        print("  --jobs 4: jobs not available (bulk_refund --help lists no --jobs)", flush=True)
    run.results["bulk_refund"] = bulk
    run.results["bulk_refund_rows_per_second"] = bulk["jobs_1_rows_per_second"]  # as before


def measure_growth(run: Run) -> None:
    big = run.args.big
    small = min(10_000, big // 2)  # the quick run's big ledger is small itself
    run.section(f"growth: {small:,} vs {big:,} charges (each with one refund, two entries)")
    for label, name, rows in [("small", SMALL_DB, small), ("big", BIG_DB, big)]:
        size_url = fresh_database(run.server, name)
        load_ledger(size_url, rows)
        verify_s, verify_kb, output = timed_subprocess(["verify_ledger"], size_url)
        assert "the books agree" in output, output
        pages = measure_in_django(size_url, "changelist_ms")
        run.results[f"ledger_{label}"] = {
            "rows": rows,
            "verify_ledger_s": verify_s,
            "verify_ledger_peak_mb": verify_kb / 1024,
            "changelist_ms": pages,
        }
        print(
            f"  {rows:>9,} rows: verify_ledger {verify_s:6.1f} s, peak "
            f"{verify_kb / 1024:5.0f} MB; changelists (ms) "
            + ", ".join(f"{k} {v:.0f}" for k, v in pages.items()),
            flush=True,
        )
    small, large = run.results["ledger_small"], run.results["ledger_big"]
    run.results["changelist_ratio_big_to_small"] = {
        k: ratio(large["changelist_ms"][k], small["changelist_ms"][k])
        for k in small["changelist_ms"]
    }
