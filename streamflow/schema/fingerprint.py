"""The CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form.

Single-object encoding names the writer's schema by this fingerprint, so it
must be bit-for-bit what the Avro specification (and every other Avro
implementation) computes. fastavro implements both the canonical form and
the Rabin fingerprint; we only fix the byte order the spec asks for.
"""

from __future__ import annotations

from typing import Any

from fastavro.schema import fingerprint, to_parsing_canonical_form

__all__ = ["canonical_form", "fingerprint64", "fingerprint_bytes"]


def canonical_form(parsed: Any) -> str:
    """The Parsing Canonical Form of an already parsed schema."""
    return str(to_parsing_canonical_form(parsed))


def fingerprint_bytes(parsed: Any) -> bytes:
    """The fingerprint as single-object encoding writes it: 8 bytes, little-endian.

    fastavro's hex string already lists the bytes in that (little-endian) order.
    """
    return bytes.fromhex(fingerprint(canonical_form(parsed), "CRC-64-AVRO"))


def fingerprint64(parsed: Any) -> int:
    """The CRC-64-AVRO fingerprint as an unsigned 64-bit integer (the spec's value)."""
    return int.from_bytes(fingerprint_bytes(parsed), "little")
