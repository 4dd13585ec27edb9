"""``streamflow tail``: decode and print what is on a topic, with keys and headers.

A record is read as its topic's format says (:mod:`streamflow.runtime.peek`):
on an ``avro`` topic its schema comes from its ``streamflow-schema`` header,
or else from the fingerprint in its single-object header; on a topic of
another format, from the schema of the topic's ports, with the codec they use
(a registry-framed record shows its schema id beside its value). A dead letter
is read in the format of the topic it came from. A record that does not decode
(a dead letter of garbage, say) is shown as raw bytes, with the reason, rather
than hidden.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer, Message
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import apps, output, registry_opts
from streamflow.runtime import peek
from streamflow.schema import SchemaStore

__all__ = ["register"]


def tail(
    target: Annotated[str, typer.Argument(help="A blueprint file, or the name of a running app.")],
    topic: Annotated[str, typer.Argument(help="The topic to read.")],
    n: Annotated[int, typer.Option("-n", "--lines", min=0, help="Show the last N records.")] = 10,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new records.")
    ] = False,
    fmt: Annotated[
        str, typer.Option("-o", "--output", help="text or json (one object a line).")
    ] = "text",
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
    ] = None,
    registry: registry_opts.RegistryOpt = None,
) -> None:
    """Decode and print records from a topic of an application."""
    if fmt not in ("text", "json"):
        output.fail(f"unknown output format {fmt!r}: use text or json", exit_code=output.EXIT_USAGE)
    app, bootstrap = apps.resolve(target, bootstrap_servers)
    if topic not in app.topics and topic not in _dlq_topics(app):
        known = ", ".join([*app.topics, *_dlq_topics(app)])
        output.fail(f"application {app.name!r} has no topic {topic!r} (topics: {known})")
    if registry:
        app = registry_opts.with_registry(app, registry)
    decoder = peek.Decoder(SchemaStore(app.schema_paths), app=app)
    problem = decoder.problem(topic)
    if problem:
        output.fail(f"cannot decode {topic} ({app.topics[topic].format}): {problem}")
    with apps.kafka_errors(bootstrap):  # the blueprint's TLS/SASL settings, as replicas use
        consumer = apps.kafka_clients(app, bootstrap).reader(client_id="streamflow-tail")
        try:
            _assign_last(consumer, topic, n)
            _print_records(consumer, decoder, fmt=fmt, limit=None if follow else n)
        except KeyboardInterrupt:
            pass
        finally:
            consumer.close()


def _dlq_topics(app: Application) -> list[str]:
    return [app.dlq_topic(s) for s in app.streamlets]


def _assign_last(consumer: Consumer, topic: str, n: int) -> None:
    try:
        peek.assign_last(consumer, topic, n)
    except peek.PeekError as exc:
        output.fail(str(exc))


def _print_records(
    consumer: Consumer, decoder: peek.Decoder, *, fmt: str, limit: int | None
) -> None:
    if limit is not None:
        records = peek.drain(consumer)
        records.sort(key=lambda m: m.timestamp()[1])
        for msg in records[-limit:] if limit else []:
            _show(msg, decoder, fmt)
        return
    while True:
        for msg in consumer.consume(100, 0.5):
            if msg.error() is None:
                _show(msg, decoder, fmt)


def _show(msg: Message, decoder: peek.Decoder, fmt: str) -> None:
    decoded = decoder.decode(msg)
    value, error = decoded.value, decoded.error
    raw_key = msg.key()
    key = raw_key.decode("utf-8", "replace") if isinstance(raw_key, bytes) else raw_key
    headers = peek.headers(msg)
    record = {
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": dt.datetime.fromtimestamp(msg.timestamp()[1] / 1000, dt.UTC).isoformat(),
        "key": key,
        "schema": decoded.schema,
        "schema_id": decoded.schema_id,
        "headers": headers,
        "value": value if error is None else None,
    }
    if error is not None:
        record["raw"] = base64.b64encode(msg.value() or b"").decode()
        record["decode_error"] = error
    if fmt == "json":
        typer.echo(json.dumps(record, default=_json_default))
        return
    line = Text.assemble(
        (f"{msg.partition()}@{msg.offset()} ", "dim"), ("key=", "dim"), (str(key), "cyan"), " "
    )
    if decoded.schema_id is not None:
        line.append(f"schema id {decoded.schema_id} ", style="dim")
    if error is None:
        line.append(json.dumps(value, default=_json_default))
    else:
        line.append(f"<undecodable: {error}> {(msg.value() or b'')[:64]!r}", style="red")
    output.console().print(line)
    extra = {k: v for k, v in headers.items() if k != "streamflow-schema"}
    if extra:
        output.console().print(Text(f"    headers: {extra}", style="dim"))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def register(app: typer.Typer) -> None:
    app.command("tail")(tail)
