"""The admin as people use it while refunds load the server: the refunds changelist while
refunds wait on the provider, and the charge's refund form by a support agent with a
second factor. Logged in through the real forms, over HTTP (gunicorn_server.py).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests
from gunicorn_server import CpuShare
from http_load import Target, outcomes, percentile_ms

ROOT = Path(__file__).resolve().parents[2]
REFUNDS_CHANGELIST = "/admin/ledger_app/refund/"


def create_superuser(url: str) -> tuple[str, str]:
    username, password = "bench-admin", uuid.uuid4().hex
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "createsuperuser",
            "--noinput",
            "--username",
            username,
            "--email",
            "bench-admin@example.com",
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SUPERUSER_PASSWORD": password},
        check=True,
        capture_output=True,
    )
    return username, password


def admin_session(base: str, username: str, password: str) -> requests.Session:
    """A session logged in through the admin's login form, as a person would."""
    session = requests.Session()
    form = session.get(f"{base}/admin/login/", timeout=30)
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    token = found.group(1) if found else session.cookies.get("csrftoken", "")
    answer = session.post(
        f"{base}/admin/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": token,
            "next": "/admin/",
        },
        headers={"Referer": f"{base}/admin/login/"},
        timeout=30,
    )
    if answer.status_code != 200 or "/login/" in answer.url:
        raise RuntimeError(f"admin login failed: {answer.status_code} {answer.url}")
    return session


def changelist_gets(session: requests.Session, base: str, count: int, load=None):
    """`count` GETs of the refunds changelist, one after another: their latencies, the
    failures (not 200, or sent to the login page), and the requests in flight at each."""
    latencies, failures, in_flight = [], 0, []
    for _ in range(count):
        if load is not None:
            in_flight.append(load.in_flight)
        began = time.perf_counter()
        response = session.get(f"{base}{REFUNDS_CHANGELIST}", timeout=60)
        latencies.append(time.perf_counter() - began)
        if response.status_code != 200 or "/login/" in response.url:
            failures += 1
    return latencies, failures, in_flight


def admin_while_refunds_wait(
    target: Target,
    session,
    cpu: CpuShare,
    *,
    gets: int,
    in_flight: int,
    settle: float,
) -> dict:
    """The refunds changelist, idle and then while `in_flight` refund posts on slow
    charges are kept waiting on the provider (started over most of `settle` seconds, so
    all of them are in flight when the GETs begin)."""
    changelist_gets(session, target.base, 10)  # warm this path in both processes
    idle, idle_failures, _ = changelist_gets(session, target.base, gets)
    with target.load(in_flight, stagger=settle * 0.8) as load:
        time.sleep(settle)
        cpu.start()
        started = time.perf_counter()
        loaded, loaded_failures, seen = changelist_gets(session, target.base, gets, load)
        window, used = time.perf_counter() - started, cpu.stop()
    result = {
        "gets": gets,
        "in_flight": in_flight,
        "idle_p50_ms": percentile_ms(idle, 0.50),
        "idle_p99_ms": percentile_ms(idle, 0.99),
        "loaded_p50_ms": percentile_ms(loaded, 0.50),
        "loaded_p99_ms": percentile_ms(loaded, 0.99),
        "get_failures": idle_failures + loaded_failures,
        "window_s": window,
        "refunds_in_flight_min": min(seen) if seen else 0,
        "refunds_in_flight_mean": sum(seen) / len(seen) if seen else 0,
        "posts": outcomes(load.calls),
        "posts_p50_ms": percentile_ms([c.seconds for c in load.calls], 0.50),
        "cpu_cores_with_refunds_waiting": used,
    }
    result["p99_ratio"] = (
        result["loaded_p99_ms"] / result["idle_p99_ms"] if result["idle_p99_ms"] else 0.0
    )
    return result


# --- the admin's refund form, as a support agent uses it ---------------------------------


def support_agent(url: str) -> tuple[str, str, str]:
    """A support agent made as staff are (`create_support_agent`): name, password and the
    second factor's secret (base32), which the bench's authenticator reads codes from."""
    username = f"bench-agent-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "manage.py", "create_support_agent", username],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
        capture_output=True,
        text=True,
    )
    password = re.search(rf"Support agent: {username} / (\S+)", done.stdout)
    secret = re.search(r"secret:\s+([A-Z2-7 ]+?)\s+\(TOTP", done.stdout)
    assert password and secret, done.stdout
    return username, password.group(1), secret.group(1).replace(" ", "")


def _page_field(page: requests.Response, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page.text)
    if found is None:
        raise RuntimeError(f"no {name} on {page.url} ({page.status_code})")
    return found.group(1)


def refund_form_round_trips(
    base: str, agent: tuple[str, str, str], charges: list[str], count: int
) -> dict:
    """`count` refunds through the charge's refund form, one after another, by an agent
    signed in with password and code as a person is: each the form's GET, then its POST
    and the charge page it redirects to (what the person waits for after clicking)."""
    import base64

    from django_otp.oath import totp  # the authenticator app's arithmetic, no Django needed

    username, password, secret = agent
    session = admin_session(base, username, password)
    form_url = f"{base}/admin/ledger_app/charge/{charges[0]}/refund/"
    asked = session.get(form_url, timeout=30)
    code = f"{totp(base64.b32decode(secret)):06d}"
    verified = session.post(
        asked.url,
        data={"code": code, "csrfmiddlewaretoken": _page_field(asked, "csrfmiddlewaretoken")},
        headers={"Referer": asked.url},
        timeout=30,
    )
    if 'id="refund-form"' not in verified.text:
        raise RuntimeError(f"the code page did not lead to the refund form: {verified.url}")
    gets, submits, failures = [], [], 0
    for charge in random.sample(charges, count):
        url = f"{base}/admin/ledger_app/charge/{charge}/refund/"
        began = time.perf_counter()
        form = session.get(url, timeout=30)
        gets.append(time.perf_counter() - began)
        began = time.perf_counter()
        answer = session.post(
            url,
            data={
                "amount": "0.02",  # not the API load's 0.01: that would be a repeat
                "reason": "requested_by_customer",
                "note": "",
                "idempotency_key": _page_field(form, "idempotency_key"),
                "charge_state": _page_field(form, "charge_state"),
                "csrfmiddlewaretoken": _page_field(form, "csrfmiddlewaretoken"),
                "_refund": "Refund",
            },
            headers={"Referer": url},
            timeout=30,
        )
        submits.append(time.perf_counter() - began)
        if answer.status_code != 200 or "of $0.02: " not in answer.text:
            failures += 1
    return {
        "count": count,
        "form_p50_ms": percentile_ms(gets, 0.50),
        "form_p99_ms": percentile_ms(gets, 0.99),
        "submit_p50_ms": percentile_ms(submits, 0.50),
        "submit_p99_ms": percentile_ms(submits, 0.99),
        "failures": failures,
    }
