"""Avro batches as columns: decoded in one native call, and encoded back in one.

A model wants a batch as arrays, not as a list of dicts. :class:`ColumnCodec`
decodes a batch of record values (single-object, registry-framed or bare Avro)
straight into numpy columns in ``streamflow._native`` (a Rust extension), and
encodes columns back into values. Where that module is missing, or does not
cover a schema, fastavro does the work, record by record, with identical
results: the native path is an optimisation, never a different answer.

Nested records are flattened into dotted names (``a.b``). Numbers are 1-D
arrays (masked where the field is nullable), timestamps and dates are
``datetime64``, numeric arrays of one shape in the whole batch are one n-d
array, and everything else is an object array of fastavro's Python values.
Each record that does not decode is reported alone, with the reason the
per-record codecs give, and the rest of the batch decodes.

A port's column codec is made from its per-record codec
(:meth:`ColumnCodec.for_codec`), so the two read the same writers and share
one registry cache. A topic with no column form (JSON) gets its columns from
decoded records (:meth:`Columns.from_records`), and :func:`records_of` turns
columns back into records; those, and the rules they follow, live in
:mod:`.column_values` and are imported from here.
"""

from __future__ import annotations

import importlib
import io
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from fastavro import schemaless_reader, schemaless_writer
from fastavro._logical_readers import LOGICAL_READERS
from fastavro._logical_writers import LOGICAL_WRITERS
from fastavro.validation import validate as fastavro_validate

from streamflow.schema import bounds, column_values, compat
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits, RecordBound
from streamflow.schema.codecs import (
    MAGIC,
    Codec,
    DecodeError,
    SingleObjectCodec,
    describe_encode_error,
    error_line,
)
from streamflow.schema.column_values import Columns, records_of
from streamflow.schema.registry import (
    UNKNOWN_ID_RECHECK_S,
    RegistryRefused,
    RegistryUnavailable,
    read_header,
)
from streamflow.schema.registry_codecs import RegistryAvroCodec
from streamflow.schema.store import Schema, SchemaStore

_NATIVE_MISSING = "the native module streamflow._native is not there"
try:
    # by name: an extension module is no Python module to import-linter, which would
    # take `from streamflow import _native` for the package, a layer above this one
    _built: Any = importlib.import_module("streamflow._native")
except ImportError as exc:  # pragma: no cover - depends on the build
    _built = None
    _NATIVE_MISSING = f"the native module streamflow._native did not import ({exc})"
_native: Any = _built  # None where it is not built (tests set it so, too)

__all__ = ["ColumnCodec", "Columns", "records_of"]

log = logging.getLogger("streamflow.schema")
Wire = Literal["single-object", "registry", "bare"]
_said: set[str] = set()


def _say_once(reason: str) -> None:
    if reason not in _said:
        _said.add(reason)
        log.info("columnar Avro codec falls back to fastavro: %s", reason)


class ColumnCodec:
    """Decode batches into :class:`Columns` and encode columns back, for one schema.

    ``wire``: ``single-object`` (other writers found by fingerprint in ``store``),
    ``registry`` (other writers by id through ``writer_lookup``; ``schema_id`` is
    ours, needed to encode, or a function that gives it once it is known) or
    ``bare`` (the body alone, in our schema). :meth:`for_codec` makes the one
    that matches a per-record codec.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        wire: Wire,
        store: SchemaStore | None = None,
        limits: DecodeLimits = DEFAULT_LIMITS,
        schema_id: int | Callable[[], int | None] | None = None,
        writer_lookup: Callable[[int], Schema | None] | None = None,
        native: bool = True,
    ) -> None:
        if wire not in ("single-object", "registry", "bare"):
            raise ValueError(f"unknown wire format {wire!r}")
        self.schema, self.wire, self.limits = schema, wire, limits
        self._store, self._lookup = store, writer_lookup
        self._known_id = None if callable(schema_id) else schema_id
        self._ask_id = schema_id if callable(schema_id) else None
        self._layout = column_values.layout(schema)
        self._bound = RecordBound(schema.raw, limits)
        self._single = SingleObjectCodec(schema, store=store, limits=limits)
        self._unsupported: dict[int, str] = {}
        self._refused: dict[int, tuple[str, float]] = {}  # registry ids, until when
        self._codec: Any = None
        self._encode_native = False
        if not native:
            return
        if _native is None:
            _say_once(_NATIVE_MISSING)
            return
        try:
            self._codec = _native.Codec(
                schema.raw,
                name=schema.name,
                wire=wire,
                logical_readers=dict(LOGICAL_READERS),
                logical_writers=dict(LOGICAL_WRITERS),
                resolver=self._resolve,
                max_items=limits.max_items,
            )
        except ValueError as exc:
            _say_once(f"{schema.name}: {exc}")
            return
        why = self._codec.encode_unsupported()
        self._encode_native = why is None
        if why:
            _say_once(f"encoding {schema.name}: {why}")

    @classmethod
    def for_codec(cls, codec: Codec, *, native: bool = True) -> ColumnCodec | None:
        """The column codec that reads and writes what the per-record ``codec`` does.

        A :class:`SingleObjectCodec` gives the single-object wire with its store;
        a :class:`RegistryAvroCodec` gives the registry wire, which looks writer
        ids up through that codec (one registry call and one cache for both) and
        takes its schema id once it has one (a producing codec's, after
        ``prepare``). Both keep the codec's schema and limits. Any other codec
        (JSON) has no column form: None.
        """
        if isinstance(codec, SingleObjectCodec):
            return cls(
                codec.schema,
                wire="single-object",
                store=codec._store,  # the writers it finds by fingerprint; read, never changed
                limits=codec.limits,
                native=native,
            )
        if isinstance(codec, RegistryAvroCodec):
            registry_codec = codec  # narrowed, for the function below
            return cls(
                codec.schema,
                wire="registry",
                limits=codec.limits,
                schema_id=lambda: registry_codec.schema_id,
                writer_lookup=codec.writer_schema,
                native=native,
            )
        return None

    @property
    def schema_id(self) -> int | None:
        """Our registry schema id, where it is known (asked for until it is)."""
        if self._known_id is None and self._ask_id is not None:
            self._known_id = self._ask_id()
        return self._known_id

    @property
    def native(self) -> bool:
        return self._codec is not None

    @property
    def header(self) -> bytes:
        if self.wire == "single-object":
            return MAGIC + self.schema.fingerprint.to_bytes(8, "little")
        if self.wire == "registry":
            schema_id = self.schema_id
            if schema_id is None:
                raise ValueError(
                    "encoding with the registry wire format needs schema_id "
                    "(a registry codec has it after prepare())"
                )
            return b"\x00" + schema_id.to_bytes(4, "big")
        return b""

    # -- decoding ------------------------------------------------------------

    def decode(self, values: Sequence[bytes]) -> Columns:
        values = [v if type(v) is bytes else bytes(v) for v in values]
        if self._codec is not None:
            answer = self._codec.decode(values)
            if answer[0] == "ok":
                rows, errors, out = column_values.from_native(self._layout, *answer[1:])
                return Columns(self._layout, rows, errors, out)
            _, reason, key = answer
            self._unsupported[key] = reason
            _say_once(f"a writer of {self.schema.name}: {reason}")
        return self._fallback_decode(values)

    def _resolve(self, key: int) -> Any:
        """The native module's question: which writer schema is ``key``, and can we read it?"""
        if key in self._unsupported:
            return "fallback:" + self._unsupported[key]
        own = (self.schema.raw, self._bound.walk_above, self._refuse(self._bound), None)
        if self.wire == "bare" or (self.wire == "registry" and key == self.schema_id):
            return own
        if self.wire == "single-object":
            if key == self.schema.fingerprint:
                return own
            writer = self._store.by_fingerprint(key) if self._store else None
            if writer is None:  # the words of SingleObjectCodec (a test holds them equal)
                return (
                    f"unknown writer schema fingerprint {key:016x}; expected "
                    f"{self.schema.name} ({self.schema.fingerprint_hex}). If it is an older "
                    "version, put that version under a history/ directory on the schema paths"
                )
            problems = compat.compatibility_problems(reader=self.schema, writer=writer)
            why = None
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                why = (
                    f"a {writer.name} record ({writer.fingerprint_hex}) cannot be read as "
                    f"{self.schema.name} ({self.schema.fingerprint_hex}): {problems[0]}{more}"
                )
            bound = RecordBound(writer.raw, self.limits)
            return (writer.raw, bound.walk_above, self._refuse(bound), why)
        refused = self._refused.get(key)
        if refused and time.monotonic() < refused[1]:
            return refused[0]
        answer = self._registry_writer(key)
        if isinstance(answer, str):
            self._refused[key] = (answer, time.monotonic() + UNKNOWN_ID_RECHECK_S)
            return answer
        if answer.fingerprint == self.schema.fingerprint:
            return own
        bound = RecordBound(answer.raw, self.limits)
        return (answer.raw, bound.walk_above, self._refuse(bound), None)

    def _registry_writer(self, schema_id: int) -> Schema | str:
        """The writer schema of a registry id, or why its records cannot be read."""
        try:
            writer = self._lookup(schema_id) if self._lookup else None
        except (RegistryUnavailable, RegistryRefused):
            raise  # backpressure, as with the per-record codec: the batch waits and is retried
        except DecodeError as exc:  # a registry codec's own words for an id it cannot read
            return str(exc)
        except Exception as exc:  # a lookup seam may raise anything; its record fails
            return f"schema id {schema_id}: {error_line(exc)}"
        if writer is None:
            return f"schema id {schema_id} is not known to this codec"
        problems = compat.compatibility_problems(reader=self.schema, writer=writer)
        if problems:
            return (
                f"a new writer schema ({writer.name}, schema id {schema_id}), which "
                f"{self.schema.name} cannot read: " + "; ".join(problems)
            )
        return writer

    @staticmethod
    def _refuse(bound: RecordBound) -> Callable[[bytes, int], str | None]:
        def refuse(data: bytes, start: int) -> str | None:
            try:
                bound.check(data, start)
            except bounds.TooLarge as exc:
                return f"refused before decoding: {exc}"
            except RecursionError:  # bounds.py recurses; the decoder refuses the depth itself
                return None
            return None

        return refuse

    def _fallback_decode(self, values: list[bytes]) -> Columns:
        rows: list[int] = []
        records: list[dict[str, Any]] = []
        errors: list[tuple[int, str]] = []
        for i, data in enumerate(values):
            try:
                records.append(self._decode_one(data))
                rows.append(i)
            except DecodeError as exc:
                errors.append((i, str(exc)))
        columns = column_values.to_columns(self._layout, records)
        return Columns(self._layout, np.array(rows, dtype=np.int64), errors, columns)

    def _decode_one(self, data: bytes) -> dict[str, Any]:
        if self.wire == "single-object":
            return self._single.decode(data)
        start, writer, reader, whose = 0, self.schema.parsed, None, self.schema.name
        raw = self.schema.raw
        if self.wire == "registry":
            schema_id, start = read_header(data, "Avro"), 5
            whose = f"{self.schema.name} (schema id {schema_id})"
            if schema_id != self.schema_id:
                found = self._registry_writer(schema_id)
                if isinstance(found, str):
                    raise DecodeError(found)
                if found.fingerprint != self.schema.fingerprint:
                    writer, reader, raw = found.parsed, self.schema.parsed, found.raw
        refusal = self._refuse(RecordBound(raw, self.limits))(data, start)
        if refusal:
            raise DecodeError(refusal)
        buf = io.BytesIO(data)
        buf.seek(start)
        try:
            record = schemaless_reader(buf, writer, reader)
        except EOFError:
            tail = (
                ""
                if self.wire == "registry"
                else f" ({len(data)} bytes end in the middle of a value)"
            )
            raise DecodeError(f"cannot decode {whose}: the record is truncated{tail}") from None
        except Exception as exc:  # fastavro raises several types
            raise DecodeError(f"cannot decode {whose}: {error_line(exc)}") from None
        if buf.tell() != len(data):
            extra = f" (schema id {schema_id})" if self.wire == "registry" else ""
            raise DecodeError(
                f"{len(data) - buf.tell()} trailing bytes after the "
                f"{self.schema.name} record{extra}"
            )
        return record  # type: ignore[return-value]  # a record schema reads as a dict

    # -- encoding ------------------------------------------------------------

    def encode(
        self, columns: Mapping[str, Any], n: int
    ) -> tuple[list[bytes | None], list[tuple[int, str]]]:
        """Each record's value (None where it failed), and why each failure failed."""
        header = self.header
        if self._encode_native:
            units = column_values.native_units(self._layout, self._codec.entries(), columns)
            values, errors = self._codec.encode(units, n, header)
            return values, errors
        return self._fallback_encode(
            column_values.to_records(self._layout, columns, n, missing="mark"), header
        )

    def encode_records(
        self, records: Sequence[dict[str, Any]]
    ) -> tuple[list[bytes | None], list[tuple[int, str]]]:
        if self._encode_native:
            # a missing field takes its default, or None, as fastavro's writer does
            fields = self.schema.raw["fields"]
            columns = {
                f["name"]: [r.get(f["name"], f.get("default")) for r in records] for f in fields
            }
            return self.encode(columns, len(records))
        return self._fallback_encode(list(records), self.header)

    def _fallback_encode(
        self, records: list[dict[str, Any]], header: bytes
    ) -> tuple[list[bytes | None], list[tuple[int, str]]]:
        values: list[bytes | None] = []
        errors: list[tuple[int, str]] = []
        for i, record in enumerate(records):
            buf = io.BytesIO()
            buf.write(header)
            try:
                if not isinstance(record, dict) or any(
                    v is column_values.MISSING for v in record.values()
                ):
                    raise ValueError("a missing column")
                # fastavro writes what does not fit (an int past 32 bits) unless asked
                if not fastavro_validate(record, self.schema.parsed, raise_errors=False):
                    raise ValueError("invalid")
                schemaless_writer(buf, self.schema.parsed, record)
                values.append(buf.getvalue())
            except Exception as exc:  # fastavro raises several types; the record fails alone
                values.append(None)
                errors.append((i, describe_encode_error(self.schema, record, exc)))
        return values, errors
