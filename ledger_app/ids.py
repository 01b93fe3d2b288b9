"""Object ids: a prefix and random letters and digits, as Stripe's look."""

from __future__ import annotations

import secrets
import string

ID_ALPHABET = string.ascii_letters + string.digits


ID_RANDOM_LENGTH = 24  # about 143 bits: ids are not guessable and not sequential


# Random bytes below this map evenly onto the alphabet (248 = 4 x 62); the rest are dropped.
_EVEN_BYTES = 256 - 256 % len(ID_ALPHABET)


def new_id(prefix: str) -> str:
    """`prefix` and ID_RANDOM_LENGTH characters drawn uniformly from ID_ALPHABET, from one
    read of the system's randomness (every refund makes three or more ids; a read per
    character was a tenth of a refund's Python)."""
    drawn = ""
    while len(drawn) < ID_RANDOM_LENGTH:
        randomness = secrets.token_bytes(ID_RANDOM_LENGTH + 8)
        drawn += "".join(ID_ALPHABET[b % len(ID_ALPHABET)] for b in randomness if b < _EVEN_BYTES)
    return prefix + drawn[:ID_RANDOM_LENGTH]
