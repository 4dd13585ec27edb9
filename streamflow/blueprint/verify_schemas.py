"""The verifier's pass over schemas: they load, ports find them, and topics agree.

Schemas are resolved by full name on the schema paths (the built-in schemas,
the blueprint's ``schemas:`` and the project's ``schemas/``). A ``.avsc`` that
is broken is reported at its own file, line and column. For each topic, every
consumer's schema must be able to read what every producer writes, under the
Avro resolution rules, because that is what the codecs do at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.ports import PortKind
from streamflow.blueprint.problems import Position
from streamflow.blueprint.report import Reporter, did_you_mean
from streamflow.blueprint.structure import PortUse, StreamletDraft, TopicDraft
from streamflow.blueprint.verify_topics import resolve_port
from streamflow.schema import Schema, SchemaStore, compatibility_problems

__all__ = ["build_store", "check_compatibility", "check_port_schemas", "port_schemas"]


def build_store(paths: list[Path], *, report: Reporter) -> SchemaStore:
    """A store over ``paths`` (which exist); every broken ``.avsc`` becomes a problem."""
    store = SchemaStore(paths)
    for error in store.problems:
        where = (
            Position(str(error.path), error.line, error.column)
            if error.path is not None
            else Position(report.file)
        )
        report.error(
            "invalid-schema",
            error.message,
            where,
            hint="fix the .avsc file, or move it off the schema paths",
        )
    return store


def check_port_schemas(
    streamlets: Mapping[str, StreamletDraft],
    *,
    descriptors: Mapping[str, StreamletDescriptor],
    store: SchemaStore,
    report: Reporter,
) -> None:
    """Every port of every streamlet names a schema the store has."""
    searched = ", ".join(str(p) for p in store.paths)
    for name, descriptor in descriptors.items():
        draft = streamlets[name]
        for port in (*descriptor.inlets, *descriptor.control_inlets, *descriptor.outlets):
            if port.schema in store:
                continue  # present; if it is broken, build_store reported it at its file
            report.error(
                "unknown-schema",
                f"streamlet {name}: {port.kind} {port.name!r} uses schema {port.schema!r}, "
                "which is not on the schema paths",
                draft.class_node,
                hint=did_you_mean(port.schema, store.names())
                or f"add the directory of its .avsc file to `schemas:` (searched: {searched})",
            )


def check_compatibility(
    topics: Mapping[str, TopicDraft],
    *,
    descriptors: Mapping[str, StreamletDescriptor],
    store: SchemaStore,
    report: Reporter,
) -> None:
    """For each topic: each consumer's schema can read each producer's schema."""
    for topic in topics.values():
        writers = _schemas(topic.producers, (PortKind.OUTLET,), descriptors, store)
        readers = _schemas(
            topic.consumers, (PortKind.INLET, PortKind.CONTROL_INLET), descriptors, store
        )
        for reader_use, reader in readers:
            for writer_use, writer in writers:
                reasons = _incompatibilities(reader=reader, writer=writer)
                if reasons:
                    report.error(
                        "incompatible-schema",
                        f"topic {topic.name}: {reader_use.ref} reads {reader.name}, which cannot "
                        f"read {writer.name} written by {writer_use.ref}: " + "; ".join(reasons),
                        topic.key,
                        hint="make the consumer's schema a compatible evolution of the "
                        "producer's (add fields with defaults), or use the same schema",
                    )


def _schemas(
    uses: list[PortUse],
    kinds: tuple[PortKind, ...],
    descriptors: Mapping[str, StreamletDescriptor],
    store: SchemaStore,
) -> list[tuple[PortUse, Schema]]:
    out = []
    for use in uses:
        port = resolve_port(use, descriptors)
        schema = store.find(port.schema) if port is not None and port.kind in kinds else None
        if schema is not None:
            out.append((use, schema))
    return out


def _incompatibilities(*, reader: Schema, writer: Schema) -> list[str]:
    try:
        return compatibility_problems(reader=reader, writer=writer)
    except Exception as exc:  # the reference checker may reject what fastavro accepted
        return [f"the schemas could not be compared ({type(exc).__name__}: {exc})"]


def port_schemas(
    descriptor: StreamletDescriptor, *, store: SchemaStore
) -> dict[str, dict[str, Any]]:
    """The Avro schema (JSON) of each of a streamlet's ports that the store has, by port."""
    out: dict[str, dict[str, Any]] = {}
    for port in (*descriptor.inlets, *descriptor.control_inlets, *descriptor.outlets):
        schema = store.find(port.schema) if port.schema else None
        if schema is not None:
            out[port.name] = schema.raw
    return out
