"""Stripe's `created` filters on refunds and charges, and every filter value the lists
and the refund update refuse: a 400 (404 for an unknown id in the path) in Stripe's
envelope with a stable code and param, never a 5xx, and nothing written."""

from datetime import UTC, datetime, timedelta

import pytest

from ledger_app.models import Charge, Event, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

T = 1_767_225_600  # 2026-01-01 00:00:00 UTC
FORM = "application/x-www-form-urlencoded"


def at(seconds: int) -> datetime:
    """Half a second into that unix second, which `created` does not show."""
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(milliseconds=500)


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content[:300]
    return [obj["id"] for obj in response.json()["data"]]


@pytest.fixture
def dated(db) -> dict[str, list[str]]:
    """Charges made at T, T+10 and T+20, and a refund of each made at the same moments."""
    charges = [ChargeFactory(created_at=at(T + 10 * n)).id for n in range(3)]
    refunds = [create_refund(RefundRequest(charge_id=pk, amount=100)).item.id for pk in charges]
    for n, pk in enumerate(refunds):
        Refund.objects.filter(pk=pk).update(created_at=at(T + 10 * n))
    return {"charges": charges, "refunds": refunds}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["charges", "refunds"])
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (f"created[gte]={T + 10}", [2, 1]),
        (f"created[gt]={T + 10}", [2]),
        (f"created[lt]={T + 10}", [0]),
        (f"created[lte]={T + 10}", [1, 0]),
        (f"created[gt]={T}&created[lt]={T + 20}", [1]),
        (f"created={T + 20}", [2]),
        (f"created={T + 21}", []),
        (f"created[gte]={T}&limit=2", [2, 1]),
        ("created[lte]=253402300799", [2, 1, 0]),
        ("created=0", []),
    ],
)
def test_created_filters(api, dated, kind, query, expected):
    made = dated[kind]

    assert ids(api.get(f"/v1/{kind}?{query}")) == [made[n] for n in expected]


@pytest.mark.django_db
def test_created_combines_with_the_charge_filter_and_cursors(api, dated):
    charge, refund = dated["charges"][1], dated["refunds"][1]

    assert ids(api.get(f"/v1/refunds?charge={charge}&created={T + 10}")) == [refund]
    assert ids(api.get(f"/v1/refunds?charge={charge}&created={T}")) == []
    after = api.get(f"/v1/refunds?created[gte]={T}&starting_after={dated['refunds'][2]}")
    assert ids(after) == [dated["refunds"][1], dated["refunds"][0]]


@pytest.mark.django_db(transaction=True)
def test_the_stripe_package_sends_created_filters(stripe_client):
    made = [ChargeFactory(created_at=at(T + 10 * n)).id for n in range(3)]
    refund = stripe_client.v1.refunds.create(params={"charge": made[0], "amount": 100})

    charges = stripe_client.v1.charges.list(params={"created": {"gt": T, "lte": T + 20}})
    same_second = stripe_client.v1.charges.list(params={"created": T})
    refunds = stripe_client.v1.refunds.list(params={"created": {"gte": T + 30}})

    assert [c.id for c in charges.data] == [made[2], made[1]]
    assert [c.id for c in same_second.data] == [made[0]]
    assert [r.id for r in refunds.data] == [refund.id]  # made now, long after T


@pytest.mark.django_db
def test_a_page_of_events_costs_two_queries(api, django_assert_max_num_queries):
    for _ in range(5):
        ChargeFactory()

    # the API key, the rate counter, then the page with each event's pending deliveries
    with django_assert_max_num_queries(3):
        listing = api.get("/v1/events?limit=5").json()

    assert [e["pending_webhooks"] for e in listing["data"]] == [0] * 5


NO_PARAM = None
# (id, method, path and query or body, status, code, param)
# fmt: off
REFUSED = [
    ("created-gt-not-digits", "get", "/v1/events?created[gt]=abc", 400,
     "parameter_invalid_integer", "created[gt]"),
    ("created-gte-float", "get", "/v1/charges?created[gte]=1.5", 400,
     "parameter_invalid_integer", "created[gte]"),
    ("created-lt-negative", "get", "/v1/refunds?created[lt]=-1", 400,
     "parameter_invalid_integer", "created[lt]"),
    ("created-lte-past-year-9999", "get", "/v1/events?created[lte]=253402300800", 400,
     "parameter_invalid_integer", "created[lte]"),
    ("created-gt-huge", "get", "/v1/charges?created[gt]=" + "9" * 40, 400,
     "parameter_invalid_integer", "created[gt]"),
    ("created-gt-blank", "get", "/v1/refunds?created[gt]=", 400,
     "parameter_invalid_integer", "created[gt]"),
    ("created-plain-not-digits", "get", "/v1/charges?created=yesterday", 400,
     "parameter_invalid_integer", "created"),
    ("created-plain-blank", "get", "/v1/events?created=", 400,
     "parameter_invalid_integer", "created"),
    ("created-unknown-operator", "get", "/v1/events?created[eq]=1", 400,
     "parameter_unknown", "created[eq]"),
    ("created-second-bad-bound", "get", f"/v1/refunds?created[gt]={T}&created[lt]=x", 400,
     "parameter_invalid_integer", "created[lt]"),
    ("created-gt-twice", "get", "/v1/events?created[gt]=1&created[gt]=2", 400,
     "parameter_invalid", "created[gt]"),
    ("created-plain-and-bracketed", "get", "/v1/charges?created=1&created[gt]=2", 400,
     "parameter_invalid", "created"),
    ("created-empty-brackets", "get", "/v1/refunds?created[]=1", 400,
     "parameter_invalid", "created[]"),
    ("created-nested-brackets", "get", "/v1/events?created[gt][x]=1", 400,
     "parameter_invalid", "created[gt][x]"),
    ("created-on-a-retrieve", "get", "/v1/refunds/re_x?created[gt]=1", 400,
     "parameter_unknown", "created"),
    ("created-on-charge-refunds", "get", "/v1/charges/{charge}/refunds?created=1", 400,
     "parameter_unknown", "created"),
    ("type-and-types", "get", "/v1/events?type=charge.failed&types[]=charge.succeeded", 400,
     "parameters_exclusive", NO_PARAM),
    ("types-not-a-list", "get", "/v1/events?types=charge.failed", 400,
     "parameter_invalid", "types"),
    ("types-more-than-20", "get", "/v1/events?" + "&".join(["types[]=a"] * 21), 400,
     "parameter_invalid", "types"),
    ("types-named-key", "get", "/v1/events?types[a]=charge.failed", 400,
     "parameter_invalid", "types[a]"),
    ("type-with-brackets", "get", "/v1/events?type[]=charge.failed", 400,
     "parameter_invalid", "type[]"),
    ("type-twice", "get", "/v1/events?type=a&type=b", 400, "parameter_invalid", "type"),
    ("types-on-refunds", "get", "/v1/refunds?types[]=refund.created", 400,
     "parameter_unknown", "types"),
    ("events-limit-zero", "get", "/v1/events?limit=0", 400, "parameter_invalid_integer",
     "limit"),
    ("events-unknown-param", "get", "/v1/events?object=event", 400, "parameter_unknown",
     "object"),
    ("events-unknown-cursor", "get", "/v1/events?starting_after=evt_nope", 400,
     "resource_missing", "starting_after"),
    ("events-both-cursors", "get", "/v1/events?starting_after=evt_a&ending_before=evt_b", 400,
     "parameters_exclusive", NO_PARAM),
    ("event-unknown", "get", "/v1/events/evt_nope", 404, "resource_missing", NO_PARAM),
    ("event-no-such-id", "get", "/v1/events/" + "e" * 65, 404, "resource_missing", NO_PARAM),
    ("event-retrieve-param", "get", "/v1/events/evt_nope?expand[]=data", 400,
     "parameter_invalid", "expand"),
    ("event-retrieve-other-param", "get", "/v1/events/evt_nope?limit=1", 400,
     "parameter_unknown", "limit"),
    ("events-post", "post", "/v1/events", 405, "method_not_allowed", NO_PARAM),
    ("charge-refunds-unknown-charge", "get", "/v1/charges/ch_nope/refunds", 404,
     "resource_missing", NO_PARAM),
    ("charge-refunds-unknown-cursor", "get",
     "/v1/charges/{charge}/refunds?starting_after=re_nope", 400, "resource_missing",
     "starting_after"),
    ("refund-update-unknown-param", "post", "/v1/refunds/{refund}", 400, "parameter_unknown",
     "amount", "amount=5"),
    ("refund-update-metadata-not-a-hash", "post", "/v1/refunds/{refund}", 400,
     "parameter_invalid", "metadata", '{"metadata": ["a"]}'),
    ("refund-update-metadata-value-not-text", "post", "/v1/refunds/{refund}", 400,
     "parameter_invalid", "metadata", '{"metadata": {"a": 1}}'),
    ("refund-update-too-much-metadata", "post", "/v1/refunds/{refund}", 400,
     "parameter_invalid", "metadata", "&".join(f"metadata[k{n}]=v" for n in range(51))),
    ("refund-update-unknown-refund", "post", "/v1/refunds/re_nope", 404, "resource_missing",
     NO_PARAM, "metadata[a]=b"),
    ("refund-update-no-such-id", "post", "/v1/refunds/" + "r" * 65, 404, "resource_missing",
     NO_PARAM, "metadata[a]=b"),
    ("refund-update-read-only-key", "post", "/v1/refunds/{refund}", 403, "api_key_read_only",
     NO_PARAM, "metadata[a]=b"),
]
# fmt: on


@pytest.mark.django_db
@pytest.mark.parametrize("row", REFUSED, ids=lambda row: row[0])
def test_refused_in_the_envelope_and_nothing_written(client, api_key, read_only_key, row):
    row_id, method, path, status, code, param, *body = row
    charge = ChargeFactory()
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
    path = path.format(charge=charge.id, refund=refund.id)
    key = read_only_key if "read-only" in row_id else api_key
    kwargs = {}
    if body:
        kwargs["content_type"] = "application/json" if body[0].startswith("{") else FORM
    before = (Event.objects.count(), Refund.objects.count(), Charge.objects.count())
    client.raise_request_exception = False  # a 500 must show up as a response here

    response = client.generic(
        method.upper(), path, *body, HTTP_AUTHORIZATION=f"Bearer {key}", **kwargs
    )

    assert response.status_code == status, response.content[:300]
    error = response.json()["error"]
    assert (error["type"], error["code"], error.get("param")) == (
        "invalid_request_error",
        code,
        param,
    ), error
    assert response["Request-Id"].startswith("req_")
    assert (Event.objects.count(), Refund.objects.count(), Charge.objects.count()) == before
    refund.refresh_from_db()
    assert refund.metadata == {}
