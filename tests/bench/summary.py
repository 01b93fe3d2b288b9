"""The bench's summary: one row per figure, with its target, met or MISSED; and what makes a
run broken whatever the machine's load. run.py prints it and writes it with the results."""

from __future__ import annotations


def broken(res: dict) -> list[str]:
    """What went wrong whatever the machine's load: answers that are not 200, admin pages
    that failed, books that do not agree. The bench exits non-zero on any of them (a
    phase that raises stops it the same way); it never does on a ratio."""
    faults = []
    if not res.get("books_agree_after_run"):
        faults.append("verify_ledger did not report that the books agree")
    for name in ("http_spread_worker", "http_inline_slow_provider"):
        if res.get(name, {}).get("non_200"):
            faults.append(f"{name}: {res[name]['non_200']} answers were not 200")
    faults += _webhook_faults(res.get("webhooks_beside_refunds", {}))
    if failures := res.get("admin_while_refunds_wait", {}).get("get_failures"):
        faults.append(f"admin changelist: {failures} GETs failed")
    felt = res.get("felt", {})
    if felt.get("api_non_200") or felt.get("admin_failures"):
        faults.append(
            f"what users wait for: {felt['api_non_200']} API answers not 200, "
            f"{felt['admin_failures']} admin form refunds not made"
        )
    faults += _purge_faults(res.get("purge_under_load"))
    return faults


def _webhook_faults(hooks: dict) -> list[str]:
    faults = []
    for name, run in hooks.items():
        if not name.startswith("threads_"):
            continue
        if run["non_200"]:
            faults.append(f"webhooks phase, {name}: {run['non_200']} refunds were not 200")
        if set(run["statuses_after"]) - {"delivered"}:
            faults.append(f"webhooks phase, {name}: not all delivered: {run['statuses_after']}")
    return faults


def _purge_faults(purge: dict | None) -> list[str]:
    faults = []
    if purge and purge["purge_exit_code"] != 0:
        faults.append(
            f"purge_expired exited {purge['purge_exit_code']}: {purge['purge_output'][-500:]}"
        )
    if purge and purge["expired_left"]:
        faults.append(f"purge_expired left {purge['expired_left']} expired events and deliveries")
    return faults


def at_least(limit: float) -> tuple[str, object]:
    return f">= {limit:g}", lambda v: v >= limit


def at_most(limit: float) -> tuple[str, object]:
    return f"<= {limit:g}", lambda v: v <= limit


def below(limit: float) -> tuple[str, object]:
    return f"< {limit:g}", lambda v: v < limit


INFO = ("(info)", None)


def summary_rows(res: dict, wait_budget: float) -> list[tuple[str, float, str, str, str]]:
    """(figure, value, value as shown, target, met / MISSED / blank for information), for
    the phases this run measured, in the order docs/benchmarks.md lists them."""
    rows = [
        *_service_rows(res),
        *_http_rows(res),
        *_webhook_rows(res),
        *_inline_rows(res, wait_budget),
        *_admin_rows(res),
        *_single_rows(res),
        *_big_rows(res),
        *_felt_rows(res),
        *_purge_rows(res),
        *_bulk_rows(res),
    ]
    out = []
    for label, value, unit, (target, check) in rows:
        if unit == "n/a":
            shown, verdict = "jobs not available", ""
        else:
            whole = unit in {"count", "ms", "MB"} or unit.startswith("of")
            shown = f"{value:.0f}" if whole else f"{value:.2f}"
            if unit.startswith("of"):
                shown = f"{shown} {unit}"
            verdict = "" if check is None else ("met" if check(value) else "MISSED")
        out.append((label, value, shown, target, verdict))
    return out


# Each phase's rows for summary_rows, (figure, value, unit, (target, check)); none when the
# phase did not run.


def _service_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "service_hot_inline" in res:
        for shape, target in [("spread", at_least(0.6)), ("hot", at_least(0.8))]:
            for dispatch in ["worker", "inline"]:
                rows.append(
                    (
                        f"service / limit, {shape} ({dispatch})",
                        res[f"service_{shape}_{dispatch}"]["ratio_to_limit"],
                        "",
                        target if dispatch == "worker" else INFO,
                    )
                )
    return rows


def _http_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "http_spread_worker" in res:
        http = res["http_spread_worker"]
        if "service_spread_worker" in res:
            rows.append(("http / service (worker)", http["ratio_to_service"], "", at_least(0.5)))
        rows.append(("http p99 ms (worker)", http["p99_ms"], "ms", below(50)))
    return rows


def _webhook_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "webhooks_beside_refunds" in res:
        hooks = res["webhooks_beside_refunds"]
        lanes, one = hooks[f"threads_{hooks['lanes']}"], hooks["threads_1"]
        beside = f"webhooks delivered / made beside http refunds, {hooks['latency_ms']} ms receiver"
        rows += [
            (f"{beside}, {hooks['lanes']} lanes", hooks["ratio"], "", at_least(0.9)),
            (f"{beside}, 1 lane", hooks["ratio_one_lane"], "", INFO),
            (
                f"webhooks: s to catch up after the load, {hooks['lanes']} lanes",
                lanes["catch_up_seconds"],
                "",
                INFO,
            ),
            ("webhooks: s to catch up after the load, 1 lane", one["catch_up_seconds"], "", INFO),
        ]
    return rows


def _inline_rows(res: dict, wait_budget: float) -> list[tuple]:
    rows: list[tuple] = []
    if "http_inline_slow_provider" in res:
        inline = res["http_inline_slow_provider"]
        slow = f"http inline, {inline['latency_ms']} ms provider"
        bound = f"{inline['bound_per_second']:.0f}/s"
        rows += [
            (f"{slow}: rate / {bound} bound", inline["ratio_to_bound"], "", at_least(0.8)),
            (f"{slow}: p99 ms", inline["p99_ms"], "ms", at_most(inline["p99_target_ms"])),
            (f"{slow}: non-200 answers", inline["non_200"], "count", at_most(0)),
            (
                f"{slow}: answered pending (> {wait_budget:g} s)",
                inline["outcomes"].get("pending", 0),
                f"of {sum(inline['outcomes'].values())}",
                INFO,
            ),
        ]
    return rows


def _admin_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "admin_while_refunds_wait" in res:
        admin = res["admin_while_refunds_wait"]
        rows += [
            (
                f"admin changelist p99, {admin['in_flight']} refunds waiting / idle",
                admin["p99_ratio"],
                "",
                at_most(2),
            ),
            (
                "admin: waiting refunds answered pending",
                admin["posts"].get("pending", 0),
                f"of {sum(admin['posts'].values())}",
                INFO,
            ),
        ]
    return rows


def _single_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "single" in res:
        rows += [
            ("replay / create", res["single"]["replay_ratio_to_create"], "", at_most(0.5)),
            ("10k prior refunds / none", res["single"]["growth_ratio"], "", at_most(1.2)),
        ]
    return rows


def _big_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "ledger_big" in res:
        rows += [
            (f"changelist {k} big / small", v, "", at_most(2))
            for k, v in res["changelist_ratio_big_to_small"].items()
        ]
        big = res["ledger_big"]
        rows += [
            ("verify_ledger big, s", big["verify_ledger_s"], "s", below(60)),
            ("verify_ledger big, peak MB", big["verify_ledger_peak_mb"], "MB", below(500)),
        ]
    return rows


def _felt_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "felt" in res:
        felt = res["felt"]
        rows += [
            (
                f"API refund p99 ms, {felt['api_latency_ms']} ms provider, "
                f"{felt['api_clients']} clients",
                felt["api_p99_ms"],
                "ms",
                INFO,
            ),
            ("admin refund form: page p99 ms", felt["admin_form_p99_ms"], "ms", INFO),
            ("admin refund form: submit p99 ms", felt["admin_submit_p99_ms"], "ms", INFO),
        ]
    return rows


def _purge_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "purge_under_load" in res:
        purge = res["purge_under_load"]
        rows += [
            ("refund p99 during purge_expired / without", purge["p99_ratio"], "", at_most(1.5)),
            ("purge_expired rows/s under refund load", purge["rows_per_second"], "count", INFO),
            (
                "purge: longest lock wait ms (sampled 0.1 s)",
                purge["during"]["longest_lock_wait_ms"],
                "ms",
                INFO,
            ),
            (
                "purge: its longest transaction ms (sampled 0.1 s)",
                purge["during"]["purge_longest_transaction_ms"],
                "ms",
                INFO,
            ),
        ]
    return rows


def _bulk_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "bulk_refund" in res and "service_spread_worker" in res:
        bulk = res["bulk_refund"]
        rows.append(
            ("bulk_refund (one process) / service", bulk["jobs_1_ratio_to_service"], "", INFO)
        )
        if bulk["jobs_available"]:
            jobs_4 = bulk["jobs_4_ratio_to_service"]
            rows.append(("bulk_refund --jobs 4 / service", jobs_4, "", at_least(0.6)))
        else:
            rows.append(("bulk_refund --jobs 4 / service", float("nan"), "n/a", (">= 0.6", None)))
    return rows


def print_summary(rows: list[dict], markdown: bool = False) -> None:
    print("summary")
    for row in rows:
        print(
            f"  {row['figure']:<52} {row['shown']:>18}   target {row['target']:<8} {row['verdict']}"
        )
    if markdown:
        print("\n| figure | value | target | |\n|---|---:|---|---|")
        for row in rows:
            print(f"| {row['figure']} | {row['shown']} | {row['target']} | {row['verdict']} |")
