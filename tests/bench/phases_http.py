"""The bench's phases through gunicorn, as `make run` serves: refunds over HTTP in worker
mode (http_worker), deliver_webhooks beside them (webhooks), inline refunds on a slow
provider (http_inline), the admin's changelist while refunds wait (admin), and what users
wait for, API and admin form (felt)."""

from __future__ import annotations

import time

import webhooks
from admin_load import (
    admin_session,
    admin_while_refunds_wait,
    create_superuser,
    refund_form_round_trips,
    support_agent,
)
from databases import (
    MAIN_DB,
)
from gunicorn_server import ConnectionWatch, CpuShare, Gunicorn
from http_load import Target, inline_slow_provider
from in_django import measure_in_django
from phases_common import Run, cpu_text, median_throughput, ratio, throughput
from workers import (
    http_worker,
    run_processes,
)


def measure_http_worker(run: Run) -> None:
    """`POST /v1/refunds` through gunicorn in worker mode, from --clients processes."""
    n, s = run.args.clients, run.args.seconds
    run.section(f"http, worker mode, {n} client processes")
    with (
        Gunicorn(run.url, run.workdir, dispatch="worker") as web,
        ConnectionWatch(run.server, MAIN_DB) as db,
    ):
        errors, cores = [], []
        cpu = CpuShare(web.pid, run.server, MAIN_DB)

        def http_run():
            cpu.start()
            gathered = run_processes(http_worker, n, web.base, run.key, s)
            cores.append(cpu.stop())  # includes the clients' start-up (in "everything else")
            errors.append(sum(g[2] for g in gathered))
            return throughput(gathered, s)

        http = median_throughput("http: POST /v1/refunds", run.args.repeats, http_run)
    http.update(db.figures(), non_200=sum(errors), stop_s=web.stop_seconds, cpu_cores=cores[-1])
    service = run.results.get("service_spread_worker", {}).get("per_second", 0)
    http["ratio_to_service"] = ratio(http["per_second"], service)
    run.results["http_spread_worker"] = http
    print(f"  last run: {cpu_text(cores[-1])}", flush=True)


def measure_webhooks(run: Run) -> None:
    """deliver_webhooks beside `POST /v1/refunds` (worker mode, --clients processes, an
    endpoint for every event, a receiver answering in --webhook-latency-ms): with
    --webhook-threads lanes, then with one. Deliveries delivered per second against
    deliveries made per second in the same window, and the seconds it takes to deliver
    the rest once the load stops (the chaos run's clients heard of refunds 112 s late)."""
    args = run.args
    n, s, lanes = args.clients, args.webhook_seconds, args.webhook_threads
    run.section(
        f"webhooks: deliver_webhooks beside POST /v1/refunds ({n} client processes, "
        f"{s:g} s), a receiver answering in {args.webhook_latency_ms} ms, {lanes} lanes and 1"
    )
    port = free_loopback_port()
    with webhooks.HookReceiver(port, args.webhook_latency_ms) as hook:
        endpoint = measure_in_django(run.url, "webhook_endpoint", hook.url)
        result: dict = {"latency_ms": args.webhook_latency_ms, "lanes": lanes}
        try:
            with Gunicorn(run.url, run.workdir, dispatch="worker") as web:
                for threads in dict.fromkeys((lanes, 1)):
                    result[f"threads_{threads}"] = delivery_run(run, web, endpoint, threads)
        finally:
            webhooks.disable_endpoint(run.url, endpoint)
    result["ratio"] = result[f"threads_{lanes}"]["delivered_to_made"]
    result["ratio_one_lane"] = result["threads_1"]["delivered_to_made"]
    run.results["webhooks_beside_refunds"] = result


def delivery_run(run: Run, web: Gunicorn, endpoint: str, threads: int) -> dict:
    """One window of HTTP refunds with `deliver_webhooks --threads {threads}` running."""
    with webhooks.Deliverer(run.url, threads, run.workdir):
        time.sleep(2)  # its start-up, before the window
        began = webhooks.database_now(run.url)
        clients, seconds = run.args.clients, run.args.webhook_seconds
        gathered = run_processes(http_worker, clients, web.base, run.key, seconds)
        ended = webhooks.database_now(run.url)
        catch_up_s, statuses = webhooks.wait_caught_up(run.url, endpoint, timeout=600)
    refunds_per_second, _ = throughput(gathered, run.args.webhook_seconds)
    counts = webhooks.window_counts(run.url, endpoint, began, ended)
    seconds = ended - began
    figures = {
        "refunds_per_second": refunds_per_second,
        "made_per_second": counts["made"] / seconds,
        "delivered_per_second": counts["delivered"] / seconds,
        "delivered_to_made": ratio(counts["delivered"], counts["made"]),
        "catch_up_seconds": catch_up_s,
        "statuses_after": statuses,
        "non_200": sum(g[2] for g in gathered),
    }
    print(
        f"  {threads} lane(s): refunds {refunds_per_second:.0f}/s made "
        f"{figures['made_per_second']:.0f} deliveries/s, "
        f"{figures['delivered_per_second']:.0f}/s delivered in the same {seconds:.1f} s "
        f"({figures['delivered_to_made']:.2f}); caught up {catch_up_s:.1f} s after the load; "
        f"deliveries then {statuses}",
        flush=True,
    )
    return figures


def free_loopback_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure_http_inline(run: Run) -> None:
    """Inline dispatch through gunicorn, every refund on a provider answering in
    --inline-latency-ms, from --inline-clients clients: against Little's law's bound."""
    args = run.args
    clients, latency = args.inline_clients, args.inline_latency_ms
    run.section(
        f"http, inline, provider answering in {latency} ms, {clients} clients "
        f"({args.inline_warm:g} s warm-up, {args.inline_seconds:g} s measured)"
    )
    with (
        Gunicorn(run.url, run.workdir, dispatch="inline", latency_ms=latency) as web,
        ConnectionWatch(run.server, MAIN_DB) as db,
    ):
        inline = slow_provider_load(run, web, clients)
    inline.update(db.figures(), stop_s=web.stop_seconds, latency_ms=latency)
    inline["bound_per_second"] = clients / (latency / 1000)
    inline["ratio_to_bound"] = ratio(inline["per_second"], inline["bound_per_second"])
    inline["p99_target_ms"] = 1.5 * latency
    run.results["http_inline_slow_provider"] = inline
    print(
        f"  {inline['per_second']:.1f}/s = {inline['ratio_to_bound']:.2f} of the "
        f"{inline['bound_per_second']:.0f}/s bound; p50 {inline['p50_ms']:.0f} ms, p99 "
        f"{inline['p99_ms']:.0f} ms; answers {inline['outcomes']}\n"
        f"  in flight (rate x mean latency) {inline['in_flight_littles_law']:.1f}; "
        f"{cpu_text(inline['cpu_cores'])}; CPU per refund: gunicorn "
        f"{inline['gunicorn_cpu_ms_per_refund']:.0f} ms, PostgreSQL "
        f"{inline['postgres_cpu_ms_per_refund']:.0f} ms\n"
        f"  peak connections {inline['peak_db_connections']} (server "
        f"{inline['peak_server_connections']}); gunicorn stopped in {inline['stop_s']:.1f} s",
        flush=True,
    )


def slow_provider_load(run: Run, web: Gunicorn, clients: int) -> dict:
    """`clients` clients posting refunds back to back on the slow charges, through `web`,
    for --inline-seconds after --inline-warm (http_load.inline_slow_provider's figures)."""
    return inline_slow_provider(
        Target(web.base, run.key, run.slow),
        CpuShare(web.pid, run.server, MAIN_DB),
        clients=clients,
        warm=run.args.inline_warm,
        seconds=run.args.inline_seconds,
    )


def measure_admin(run: Run) -> None:
    """The refunds changelist, idle and while --admin-in-flight refunds wait on a provider
    answering in --admin-latency-ms."""
    args = run.args
    in_flight, latency = args.admin_in_flight, args.admin_latency_ms
    run.section(
        f"admin refunds changelist, {args.admin_gets} GETs idle, then with {in_flight} "
        f"refunds waiting on a provider answering in {latency} ms"
    )
    username, password = create_superuser(run.url)
    with (
        Gunicorn(run.url, run.workdir, dispatch="inline", latency_ms=latency) as web,
        ConnectionWatch(run.server, MAIN_DB) as db,
    ):
        admin = admin_while_refunds_wait(
            Target(web.base, run.key, run.slow),
            admin_session(web.base, username, password),
            CpuShare(web.pid, run.server, MAIN_DB),
            gets=args.admin_gets,
            in_flight=in_flight,
            settle=args.admin_settle,
        )
    admin.update(db.figures(), stop_s=web.stop_seconds, latency_ms=latency)
    run.results["admin_while_refunds_wait"] = admin
    print(
        f"  idle p50 {admin['idle_p50_ms']:.0f} ms, p99 {admin['idle_p99_ms']:.0f} ms; "
        f"with refunds waiting p50 {admin['loaded_p50_ms']:.0f} ms, p99 "
        f"{admin['loaded_p99_ms']:.0f} ms ({admin['p99_ratio']:.2f}x)\n"
        f"  refunds in flight during the GETs: min {admin['refunds_in_flight_min']}, mean "
        f"{admin['refunds_in_flight_mean']:.1f}; their answers {admin['posts']} (p50 "
        f"{admin['posts_p50_ms']:.0f} ms); GET failures {admin['get_failures']}; peak "
        f"connections {admin['peak_db_connections']} (server "
        f"{admin['peak_server_connections']}); gunicorn stopped in {admin['stop_s']:.1f} s\n"
        f"  while refunds waited: {cpu_text(admin['cpu_cores_with_refunds_waiting'])}",
        flush=True,
    )


def measure_felt(run: Run) -> None:
    """What users wait for, beside the ratios: an API refund's p99 with a provider that
    answers in --felt-latency-ms under --felt-clients clients, and the admin's refund
    form (its page, then its submit) by a support agent with a second factor, on the same
    server once the clients have stopped."""
    args = run.args
    clients, latency = args.felt_clients, args.felt_latency_ms
    run.section(
        f"what users wait for: API refunds with a {latency} ms provider and {clients} "
        f"clients, then {args.form_refunds} refunds through the admin's form"
    )
    agent = support_agent(run.url)
    with Gunicorn(run.url, run.workdir, dispatch="inline", latency_ms=latency) as web:
        api = slow_provider_load(run, web, clients)
        form = refund_form_round_trips(web.base, agent, run.slow, args.form_refunds)
    run.results["felt"] = {
        "api_latency_ms": latency,
        "api_clients": clients,
        "api_p50_ms": api["p50_ms"],
        "api_p99_ms": api["p99_ms"],
        "api_per_second": api["per_second"],
        "api_non_200": api["non_200"],
        **{f"admin_{name}": value for name, value in form.items()},
    }
    print(
        f"  API refund: p50 {api['p50_ms']:.0f} ms, p99 {api['p99_ms']:.0f} ms at "
        f"{api['per_second']:.1f}/s; answers {api['outcomes']}\n"
        f"  admin refund form: page p50 {form['form_p50_ms']:.0f} ms, p99 "
        f"{form['form_p99_ms']:.0f} ms; submit (POST and the page it leads to) p50 "
        f"{form['submit_p50_ms']:.0f} ms, p99 {form['submit_p99_ms']:.0f} ms; failures "
        f"{form['failures']}",
        flush=True,
    )
