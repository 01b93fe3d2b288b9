"""Amount ceilings per currency (settings AMOUNT_CEILINGS and AMOUNT_CEILING_DEFAULT):
every way a charge is made refuses one above its currency's ceiling with
amount_too_large, writing nothing. Refunds have no ceiling of their own: a refund is
bounded by its charge."""

import pytest

from ledger_app import errors
from ledger_app.charges.services import create_charge, record_charge
from ledger_app.models import IdempotencyRecord
from ledger_app.money import amount_ceiling, validate_within_ceiling
from tests.invariants import rows_written

pytestmark = pytest.mark.django_db

STRIPE_CEILING = 99_999_999  # eight digits: $999,999.99, ¥99,999,999
IDR_CEILING = 999_999_999_999  # twelve digits
AT_THE_BOUNDARY = [("usd", STRIPE_CEILING), ("jpy", STRIPE_CEILING), ("idr", IDR_CEILING)]


@pytest.fixture(autouse=True)
def _instant_provider(settings):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0


class TestAmountCeiling:
    def test_the_defaults_are_stripes_eight_digits_and_twelve_for_idr(self):
        assert amount_ceiling("usd") == amount_ceiling("jpy") == STRIPE_CEILING
        assert amount_ceiling("eur") == amount_ceiling("kwd") == STRIPE_CEILING
        assert amount_ceiling("idr") == IDR_CEILING

    def test_the_currency_is_looked_up_in_any_case(self):
        assert amount_ceiling("IDR") == IDR_CEILING

    def test_the_refusal_names_the_ceiling_in_major_and_minor_units(self):
        with pytest.raises(errors.AmountTooLarge) as refused:
            validate_within_ceiling(STRIPE_CEILING + 1, "usd")

        assert (refused.value.code, refused.value.param) == ("amount_too_large", "amount")
        assert refused.value.message == (
            "Amount must be at most $999,999.99 (99999999 minor units) for USD."
        )

    def test_a_ceiling_set_for_a_currency_overrides_the_default(self, settings):
        settings.AMOUNT_CEILINGS = {"usd": 5_000_000}

        assert amount_ceiling("usd") == 5_000_000
        assert amount_ceiling("jpy") == STRIPE_CEILING

    def test_the_default_setting_covers_every_currency_not_named(self, settings):
        settings.AMOUNT_CEILING_DEFAULT = 1_000

        assert amount_ceiling("eur") == 1_000
        assert amount_ceiling("idr") == IDR_CEILING


class TestCreateCharge:
    @pytest.mark.parametrize(("currency", "ceiling"), AT_THE_BOUNDARY)
    def test_accepts_a_charge_of_exactly_the_ceiling(self, currency, ceiling):
        charge = create_charge(amount=ceiling, currency=currency).item

        assert (charge.amount, charge.currency, charge.status) == (ceiling, currency, "succeeded")

    @pytest.mark.parametrize(("currency", "ceiling"), AT_THE_BOUNDARY)
    def test_refuses_one_minor_unit_more_and_writes_nothing(self, currency, ceiling):
        before = rows_written()

        with pytest.raises(errors.AmountTooLarge) as refused:
            create_charge(amount=ceiling + 1, currency=currency, idempotency_key="order-1")

        assert refused.value.code == "amount_too_large"
        assert f"({ceiling} minor units) for {currency.upper()}" in refused.value.message
        assert rows_written() == before

    def test_the_key_of_a_refused_charge_is_free_for_the_corrected_one(self):
        with pytest.raises(errors.AmountTooLarge):
            create_charge(amount=9_000_000_000_000_000_000, currency="usd", idempotency_key="k")

        corrected = create_charge(amount=STRIPE_CEILING, currency="usd", idempotency_key="k")

        assert not corrected.replayed
        assert IdempotencyRecord.objects.get(key="k").charge_id == corrected.item.id

    def test_a_lowered_ceiling_applies_at_once(self, settings):
        settings.AMOUNT_CEILINGS = {"usd": 5_000}

        with pytest.raises(errors.AmountTooLarge):
            create_charge(amount=5_001, currency="usd")
        assert create_charge(amount=5_000, currency="usd").item.amount == 5_000

    def test_a_raised_default_lets_a_larger_charge_through(self, settings):
        settings.AMOUNT_CEILING_DEFAULT = 10 * STRIPE_CEILING

        charge = create_charge(amount=STRIPE_CEILING + 1, currency="eur").item

        assert charge.status == "succeeded"


class TestRecordCharge:
    """Imported and demo charges go through record_charge: the same ceiling."""

    @pytest.mark.parametrize(("currency", "ceiling"), AT_THE_BOUNDARY)
    def test_refuses_above_the_ceiling_and_writes_nothing(self, currency, ceiling):
        before = rows_written()

        with pytest.raises(errors.AmountTooLarge):
            record_charge(amount=ceiling + 1, currency=currency)

        assert rows_written() == before
        assert record_charge(amount=ceiling, currency=currency).amount == ceiling
