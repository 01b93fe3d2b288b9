"""Ids are not guessable: a prefix and 24 characters drawn uniformly from 62."""

import secrets
from collections import Counter
from unittest import mock

from ledger_app.models import ID_ALPHABET, ID_RANDOM_LENGTH, new_id, new_refund_id


def test_an_id_is_its_prefix_and_24_letters_and_digits():
    made = new_refund_id()

    assert made.startswith("re_")
    assert len(made) == 3 + ID_RANDOM_LENGTH
    assert set(made[3:]) <= set(ID_ALPHABET)


def test_every_character_is_drawn_about_equally_often_and_no_id_repeats():
    ids = [new_id("x_") for _ in range(20_000)]
    counts = Counter("".join(i[2:] for i in ids))

    assert len(set(ids)) == len(ids)
    assert set(counts) == set(ID_ALPHABET)
    expected = 20_000 * ID_RANDOM_LENGTH / len(ID_ALPHABET)  # about 7,742 each
    # Pearson's chi-squared over 61 degrees of freedom: about 61 for a uniform draw, above
    # 120 about once in a million runs. A byte taken modulo 62 without dropping the bytes
    # from 248 up favours the first 8 characters by 25% and scores in the thousands.
    chi_squared = sum((n - expected) ** 2 / expected for n in counts.values())
    assert chi_squared < 120, counts.most_common(10)


def test_bytes_that_would_favour_some_characters_are_dropped():
    # 248 to 255 would map onto the first eight characters a second time: never used.
    uneven_then_even = [bytes([248, 255] * 16), bytes(range(32))]

    with mock.patch.object(secrets, "token_bytes", side_effect=uneven_then_even):
        made = new_id("x_")

    assert made == "x_" + ID_ALPHABET[:ID_RANDOM_LENGTH]
