"""The one way out (services/egress.py): disguised local addresses are refused at every
door a client URL comes in by (API create, API update, every delivery), the connection
goes to the address that was checked, TLS still checks the name, and an egress proxy."""

from __future__ import annotations

import ast
import http.server
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from urllib3.util import parse_url

from ledger_app.events import delivery as webhook_delivery
from ledger_app.events import egress
from ledger_app.events.delivery import deliver_due
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import WebhookDelivery, WebhookEndpoint
from tests.source_tree import ROOT, application_modules, imported_modules
from tests.webhooks.conftest import record_events
from tests.webhooks.disguises import DISGUISED, NAMES, PUBLIC

FORM = "application/x-www-form-urlencoded"


def test_the_corpus_is_large_and_has_no_repeats():
    assert len(DISGUISED) >= 40 and len(set(DISGUISED)) == len(DISGUISED)


@pytest.fixture
def resolver(monkeypatch):
    """getaddrinfo from NAMES and address literals only; every lookup is logged."""
    asked: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        asked.append(host)
        found = []
        for address in NAMES.get(host, [host]):
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            try:
                socket.inet_pton(family, address)
            except OSError:
                raise socket.gaierror(f"{host} not found") from None
            sockaddr = (address, port) if family == socket.AF_INET else (address, port, 0, 0)
            found.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
        return found

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.usefixtures("resolver")
class TestTheCorpus:
    @pytest.mark.parametrize("url", DISGUISED)
    def test_each_is_refused_by_the_check(self, url):
        with pytest.raises(egress.Refused) as refused:
            egress.check(url)

        assert refused.value.reason

    @pytest.mark.parametrize("url", DISGUISED)
    def test_each_is_refused_at_delivery_without_a_connection(self, url, no_connection):
        status_code, error = webhook_delivery.post(url, "{}", "whsec_test")

        assert (status_code, no_connection) == (None, [])
        assert error.startswith("refused: ")

    @pytest.mark.django_db
    @pytest.mark.parametrize("url", DISGUISED)
    def test_each_is_refused_by_the_api_on_create(self, api, url):
        body = urlencode({"url": url, "enabled_events[]": "*"})

        response = api.post("/v1/webhook_endpoints", body, content_type=FORM)

        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("url_invalid", "url")
        assert error["message"].startswith("The URL is refused: ")
        assert not WebhookEndpoint.objects.exists()

    @pytest.mark.django_db
    @pytest.mark.parametrize("url", DISGUISED)
    def test_each_is_refused_by_the_api_on_update(self, api, url, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        endpoint = create_endpoint(url="http://127.0.0.1:8790/hooks", enabled_events=["*"])
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = False

        response = api.post(
            f"/v1/webhook_endpoints/{endpoint.pk}", urlencode({"url": url}), content_type=FORM
        )

        assert response.status_code == 400
        assert response.json()["error"]["code"] == "url_invalid"
        endpoint.refresh_from_db()
        assert endpoint.url == "http://127.0.0.1:8790/hooks"


class TestTheFinding:
    """http://127.0.0.1:8790\\@8.8.8.8/ passed the old check (urlsplit reads the host as
    8.8.8.8) and was delivered to 127.0.0.1:8790 (urllib3 reads it so)."""

    def test_the_two_parsers_disagree_on_it(self):
        url = "http://127.0.0.1:8790\\@8.8.8.8/"

        assert urlsplit(url).hostname == "8.8.8.8"
        assert (parse_url(url).host, parse_url(url).port) == ("127.0.0.1", 8790)

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "disguise", ["http://127.0.0.1:{port}\\@8.8.8.8/", "http://127.0.0.1:{port}%5C@8.8.8.8/"]
    )
    def test_a_stored_disguise_reaches_the_delivery_path_and_is_refused(
        self, disguise, receiver, settings
    ):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        endpoint = create_endpoint(url=receiver.url, enabled_events=["*"])
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
            url=disguise.format(port=receiver.port)
        )
        record_events(1)

        tally = deliver_due()

        assert receiver.received == []
        assert dict(tally.statuses) == {"refused": 2}
        errors = set(WebhookDelivery.objects.values_list("last_error", flat=True))
        assert len(errors) == 1 and errors.pop().startswith("refused: the URL must not contain")

    @pytest.mark.django_db
    def test_form_encoded_as_the_finding_sent_it_the_api_refuses_it(self, api, receiver):
        """A form body decodes %5C to a backslash before the URL is checked."""
        url = f"http://127.0.0.1:{receiver.port}%5C@8.8.8.8/"
        body = "enabled_events[]=*&url=" + url.replace("%", "%25").replace("\\", "%5C")
        raw = f"enabled_events[]=*&url=http://127.0.0.1:{receiver.port}%5C@8.8.8.8/"

        responses = [
            api.post("/v1/webhook_endpoints", form, content_type=FORM) for form in (body, raw)
        ]

        assert [r.status_code for r in responses] == [400, 400]
        assert [r.json()["error"]["code"] for r in responses] == ["url_invalid"] * 2
        assert not WebhookEndpoint.objects.exists()

    @pytest.mark.django_db
    def test_the_api_refuses_it_on_update(self, api, receiver, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        endpoint = create_endpoint(url=receiver.url, enabled_events=["*"])
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
        form = urlencode({"url": f"http://127.0.0.1:{receiver.port}\\@8.8.8.8/"})

        response = api.post(f"/v1/webhook_endpoints/{endpoint.pk}", form, content_type=FORM)

        assert response.status_code == 400 and response.json()["error"]["code"] == "url_invalid"
        endpoint.refresh_from_db()
        assert endpoint.url == receiver.url


class TestTheAddressIsPinned:
    @pytest.mark.django_db
    def test_a_delivery_dials_the_address_it_checked_not_the_name_again(
        self, monkeypatch, no_connection, endpoint, settings
    ):
        """A rebinding resolver (public first, loopback after) gets no second question."""
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
        answers = iter([[PUBLIC], ["127.0.0.1"], ["127.0.0.1"]])
        asked = []

        def rebinding(host, port, *args, **kwargs):
            asked.append(host)
            addresses = next(answers) if host == "rebind.example.com" else [host]
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

        record_events(1)
        WebhookEndpoint.objects.update(url="http://rebind.example.com:8790/h")
        WebhookDelivery.objects.exclude(pk=WebhookDelivery.objects.latest("pk").pk).delete()
        monkeypatch.setattr(socket, "getaddrinfo", rebinding)

        deliver_due()

        assert asked.count("rebind.example.com") == 1
        assert no_connection == [(PUBLIC, 8790)]
        delivery = WebhookDelivery.objects.get()
        assert delivery.last_error == "could not connect: connection refused"

    def test_a_name_that_turns_local_between_deliveries_is_refused_then(
        self, resolver, no_connection, monkeypatch
    ):
        monkeypatch.setitem(NAMES, "turns.example.com", [PUBLIC])
        first = webhook_delivery.post("http://turns.example.com/h", "{}", "whsec_test")
        monkeypatch.setitem(NAMES, "turns.example.com", ["127.0.0.1"])

        second = webhook_delivery.post("http://turns.example.com/h", "{}", "whsec_test")

        assert first == (None, "could not connect: connection refused")
        assert second == (
            None,
            "refused: address 127.0.0.1 of turns.example.com is loopback "
            "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)",
        )
        assert [address for address, _ in no_connection] == [PUBLIC]

    def test_the_setting_still_allows_loopback_and_the_host_header_is_the_name(
        self, settings, resolver
    ):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        Recording.seen = []

        with _server(Recording) as port:
            answer = egress.post(f"http://localhost:{port}/hooks?a=1", b"{}", {}, timeout=5)

        assert answer == egress.Answer(204, b"")
        assert Recording.seen == [("/hooks?a=1", f"localhost:{port}")]
        assert resolver.count("localhost") == 1


class TestTheAnswerKept:
    @pytest.mark.django_db
    def test_a_long_internal_answer_is_cut_to_a_short_labelled_excerpt(
        self, endpoint, receiver, monkeypatch
    ):
        body = b"Traceback\x00\x1b[31m secret=" + b"x" * 5000

        class Answering(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        with _server(Answering) as port:
            WebhookEndpoint.objects.update(url=f"http://127.0.0.1:{port}/hooks")
            record_events(1)
            deliver_due()

        errors = set(WebhookDelivery.objects.values_list("last_status_code", "last_error"))
        assert errors == {
            (
                500,
                "HTTP 500; receiver said (first 64 bytes, escaped): "
                "Traceback\\x00\\x1b[31m secret=" + "x" * 41,
            )
        }

    def test_a_redirect_is_not_followed(self, settings, resolver):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        hits = []

        class Redirecting(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                hits.append(self.path)
                self.send_response(307)
                self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        with _server(Redirecting) as port:
            answer = egress.post(f"http://127.0.0.1:{port}/a", b"{}", {}, timeout=5)

        assert (answer.status, hits) == (307, ["/a"])


class _server:
    """An HTTP(S) server on 127.0.0.1 in a thread, for the length of a `with`."""

    def __init__(self, handler, context: ssl.SSLContext | None = None) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)

    def __enter__(self) -> int:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self.httpd.server_address[1]

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Recording(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_POST(self):  # http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Recording.seen.append((self.path, self.headers["Host"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def certificate(tmp_path):
    """A self-signed certificate for hooks.example.test, as a CA bundle of its own."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.example.test"]
        + ["-addext", "subjectAltName=DNS:hooks.example.test"],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return cert, context


class TestTls:
    def test_tls_is_verified_against_the_name_while_the_address_is_pinned(
        self, settings, monkeypatch, resolver, certificate
    ):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        cert, context = certificate
        monkeypatch.setattr(egress, "CA_BUNDLE", str(cert))
        monkeypatch.setitem(NAMES, "hooks.example.test", ["127.0.0.1"])
        monkeypatch.setitem(NAMES, "other.example.test", ["127.0.0.1"])
        Recording.seen = []

        with _server(Recording, context) as port:
            right = egress.post(f"https://hooks.example.test:{port}/h", b"{}", {}, timeout=5)
            with pytest.raises(egress.NoAnswer) as wrong:
                egress.post(f"https://other.example.test:{port}/h", b"{}", {}, timeout=5)

        assert right.status == 204
        assert Recording.seen == [("/h", f"hooks.example.test:{port}")]
        assert wrong.value.reason.startswith("TLS certificate refused: ")
        assert "other.example.test" in wrong.value.reason
        assert resolver.count("hooks.example.test") == 1


class TestTheEgressProxy:
    def test_deliveries_go_through_the_proxy_to_the_address_checked_here(self, settings, resolver):
        Recording.seen = []

        with _server(Recording) as port:
            settings.WEBHOOK_PROXY_URL = f"http://127.0.0.1:{port}"
            answer = egress.post("http://hooks.example.com/h", b"{}", {}, timeout=5)

        assert answer.status == 204
        assert Recording.seen == [(f"http://{PUBLIC}:80/h", f"{PUBLIC}:80")]

    def test_a_name_that_does_not_resolve_here_is_not_handed_to_the_proxy(self, settings, resolver):
        """The proxy would resolve it itself, to whatever its resolver says."""
        Recording.seen = []

        with _server(Recording) as port:
            settings.WEBHOOK_PROXY_URL = f"http://127.0.0.1:{port}"
            with pytest.raises(egress.Refused) as refused:
                egress.post("http://unresolved.example.com/h", b"{}", {}, timeout=5)

        assert Recording.seen == []
        assert refused.value.reason == "the host unresolved.example.com could not be resolved"

    @pytest.mark.parametrize(
        "url",
        ["http://localhost:8790/", "http://metadata.google.internal/", "http://mixed.example.com/"],
    )
    def test_a_name_that_resolves_here_to_a_local_address_is_refused_before_the_proxy(
        self, settings, resolver, url
    ):
        Recording.seen = []

        with _server(Recording) as port:
            settings.WEBHOOK_PROXY_URL = f"http://127.0.0.1:{port}"
            with pytest.raises(egress.Refused) as refused:
                egress.post(url, b"{}", {}, timeout=5)

        assert Recording.seen == []
        assert "set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it" in refused.value.reason

    @pytest.mark.parametrize(
        "url",
        ["http://127.0.0.1:8790\\@8.8.8.8/", "http://8.8.8.8@127.0.0.1/", "http://127.0.0.1/"],
    )
    def test_the_form_and_written_addresses_are_still_checked_here(
        self, settings, url, no_connection
    ):
        settings.WEBHOOK_PROXY_URL = "http://127.0.0.1:4750"

        with pytest.raises(egress.Refused):
            egress.post(url, b"{}", {}, timeout=5)

        assert no_connection == []


# --- every door a client URL comes in by goes through egress --------------------------

NETWORK_CLIENTS = ("requests", "urllib3", "http.client", "urllib.request", "httpx", "aiohttp")
# Who else may import a network client, and why it is not a way out for a client's URL.
ALLOWED = {
    Path("ledger_app/events/egress.py"): "the one way out",
    Path("ledger_app/events/egress_addresses.py"): "this machine's own addresses "
    "(getifaddrs, socket's family numbers); it connects to nothing",
    Path("ledger_app/events/egress_deadline.py"): "the one way out's whole-request "
    "deadline: the connections egress.post() opens, shut when its time is up",
    Path(
        "ledger_app/provider/gateways/stripe.py"
    ): "the provider's own API (requests for its errors)",
    Path("simulated_provider/news.py"): "the simulated provider's webhooks, to "
    "SIMULATED_PROVIDER_WEBHOOK_URL from settings, never a client's URL",
}


class TestEveryCallerGoesThroughEgress:
    def test_no_other_module_imports_a_network_client_or_opens_a_socket(self):
        modules = application_modules()
        offenders = sorted(
            f"{path}: {name}"
            for path, tree in modules.items()
            if path not in ALLOWED
            for name in imported_modules(tree)
            if name == "socket" or name.split(".")[0] in NETWORK_CLIENTS or name in NETWORK_CLIENTS
        )

        assert len(modules) > 40 and Path("ledger_app/events/delivery.py") in modules
        assert offenders == []

    def test_webhooks_reach_the_network_only_through_egress_check_and_post(self):
        webhook_modules = ("endpoints.py", "delivery.py")
        trees = [ast.parse((ROOT / "ledger_app/events" / m).read_text()) for m in webhook_modules]
        used = {
            node.attr
            for tree in trees
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "egress"
        }

        assert {"check", "post"} <= used
        assert used <= {
            "check",
            "post",
            "Refused",
            "NoAnswer",
            "Answer",
            "EXCERPT_BYTES",
            "escaped",
        }
