"""The codecs of a streamlet's ports, as a unit test uses them.

Every value that crosses a port in the testkit goes through the real Avro
single-object codec, both ways, so a unit test sees the records the deployed
streamlet would see: defaults filled in, timestamps as aware datetimes, and an
error for a value that does not fit its schema. On top of what Kafka would do,
values are checked *strictly* by default: a field the schema does not have is
an error here, where fastavro would drop it silently in production.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamflow.api.descriptor import PortDescriptor, StreamletDescriptor
from streamflow.schema.codecs import EncodeError, SingleObjectCodec
from streamflow.schema.store import SchemaError, SchemaStore
from streamflow.schema.validate import validation_problems

__all__ = ["HarnessError", "PortCodec", "port_codecs"]


class HarnessError(ValueError):
    """A test that uses the harness in a way the streamlet does not allow."""


@dataclass(frozen=True)
class PortCodec:
    """One port's codec, with errors that name the port."""

    port: PortDescriptor
    codec: SingleObjectCodec
    strict: bool

    @property
    def label(self) -> str:
        return f"{self.port.kind} {self.port.name!r} ({self.port.schema})"

    def encode(self, value: Any, *, what: str) -> bytes:
        """``value`` as Avro single-object bytes; :class:`EncodeError` says where and why."""
        if not isinstance(value, dict):
            raise EncodeError(
                f"{what} for {self.label} is a {type(value).__name__}, not a dict (a record)"
            )
        problems = validation_problems(self.codec.schema, value, strict=self.strict)
        if problems:
            raise EncodeError(
                f"{what} for {self.label} does not match its schema: " + "; ".join(problems)
            )
        try:
            return self.codec.encode(value)
        except EncodeError as exc:
            raise EncodeError(f"{what} for {self.label}: {exc}") from None

    def round_trip(self, value: Any, *, what: str) -> dict[str, Any]:
        """``value`` as a reader of the port would see it after Kafka."""
        return self.codec.decode(self.encode(value, what=what))


def port_codecs(
    descriptor: StreamletDescriptor, store: SchemaStore, *, strict: bool
) -> dict[str, PortCodec]:
    """A codec for every port, by port name; :class:`HarnessError` names each missing schema."""
    codecs: dict[str, PortCodec] = {}
    missing: list[str] = []
    ports = (*descriptor.inlets, *descriptor.control_inlets, *descriptor.outlets)
    for port in ports:
        try:
            schema = store.get(port.schema)
        except SchemaError as exc:
            missing.append(f"{port.kind} {port.name!r}: {exc.message}")
            continue
        codecs[port.name] = PortCodec(port, SingleObjectCodec(schema, store=store), strict)
    if missing:
        raise HarnessError(_missing_message(descriptor, store, missing))
    return codecs


def _missing_message(
    descriptor: StreamletDescriptor, store: SchemaStore, missing: list[str]
) -> str:
    lines = [f"{descriptor.class_path}: port schemas not found:", *missing]
    searched = ", ".join(str(p) for p in store.paths) or "nothing"
    lines.append(f"searched {searched}; pass schema_paths= to the harness")
    lines += [f"schema problem: {p}" for p in store.problems]
    return "\n  ".join(lines)
