"""Part 1, idempotency: keys, fingerprints and the canonical JSON they are computed over, and the
step keys handed to providers."""

from firesafe.idempotency.keys import (
    MAX_DEPTH,
    MAX_KEY_LENGTH,
    MAX_PAYLOAD_BYTES,
    canonical_json,
    check_key,
    check_name,
    fingerprint,
    new_key,
    step_key,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "canonical_json",
    "check_key",
    "check_name",
    "fingerprint",
    "new_key",
    "step_key",
]
