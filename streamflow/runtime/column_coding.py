"""A topic's values into columns and columns into an outlet's bytes, one form whatever
the format: natively where the codec has a column form (Avro), else record by record
through the codec, with each record's failure its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from streamflow.schema.codecs import Codec, DecodeError, EncodeError, error_line
from streamflow.schema.columns import ColumnCodec, Columns, records_of
from streamflow.schema.registry import RegistryRefused, RegistryUnavailable

__all__ = ["ColumnDecoder", "ColumnEncoder"]


class ColumnDecoder:
    """A topic's values into columns: natively, or through its codec record by record."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._columns = ColumnCodec.for_codec(codec)

    @property
    def columnar(self) -> bool:
        """Whether the topic has a column form (Avro), rather than records made columns."""
        return self._columns is not None

    def decode(self, values: list[bytes]) -> Columns:
        if self._columns is not None:
            return self._columns.decode(values)
        records: list[dict[str, Any]] = []
        rows: list[int] = []
        errors: list[tuple[int, str]] = []
        for index, data in enumerate(values):
            try:
                records.append(self._codec.decode(data))
            except DecodeError as exc:
                errors.append((index, str(exc)))
                continue
            except (RegistryUnavailable, RegistryRefused):
                raise  # never a dead letter: the batch backs off (see the processor)
            except Exception as exc:  # a codec's own failure on these bytes: still this record's
                errors.append((index, f"cannot decode: {error_line(exc)}"))
                continue
            rows.append(index)
        return Columns.from_records(
            self._codec.schema, records, rows=np.asarray(rows, dtype=np.int64), errors=errors
        )


class ColumnEncoder:
    """Columns into the outlet's bytes: natively, or through its codec record by record."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._columns = ColumnCodec.for_codec(codec)

    def encode(
        self, columns: Mapping[str, Any], n: int
    ) -> tuple[list[bytes | None], list[tuple[int, str]]]:
        if self._columns is not None:
            return self._columns.encode(columns, n)
        encoded: list[bytes | None] = []
        errors: list[tuple[int, str]] = []
        for index, value in enumerate(records_of(self._codec.schema, columns, n)):
            try:
                encoded.append(self._codec.encode(value))
            except Exception as exc:
                encoded.append(None)
                errors.append(
                    (index, error_line(exc) if not isinstance(exc, EncodeError) else str(exc))
                )
        return encoded, errors
