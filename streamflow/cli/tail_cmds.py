"""``streamflow tail``: decode and print what is on a topic, with keys and headers.

The schema of each record comes from its ``streamflow-schema`` header, or else
from the fingerprint in its single-object header, looked up among the
application's schemas; a record that decodes with neither (a dead letter of
garbage, say) is shown as raw bytes rather than hidden.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
import uuid
from typing import Annotated, Any, cast

import typer
from confluent_kafka import Consumer, Message, TopicPartition
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import apps, output
from streamflow.schema import DecodeError, SchemaStore, SingleObjectCodec
from streamflow.schema.codecs import MAGIC

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
) -> None:
    """Decode and print records from a topic of an application."""
    if fmt not in ("text", "json"):
        output.fail(f"unknown output format {fmt!r}: use text or json", exit_code=output.EXIT_USAGE)
    app, bootstrap = apps.resolve(target, bootstrap_servers)
    if topic not in app.topics and topic not in _dlq_topics(app):
        known = ", ".join([*app.topics, *_dlq_topics(app)])
        output.fail(f"application {app.name!r} has no topic {topic!r} (topics: {known})")
    decoder = _Decoder(SchemaStore(app.schema_paths))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"streamflow-tail-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
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
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None:
        output.fail(f"topic {topic!r}: {meta.error.str()}")
    partitions = []
    for p in meta.partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        partitions.append(TopicPartition(topic, p, max(low, high - n)))
    consumer.assign(partitions)


def _print_records(consumer: Consumer, decoder: _Decoder, *, fmt: str, limit: int | None) -> None:
    if limit is not None:
        records = _drain(consumer)
        records.sort(key=lambda m: m.timestamp()[1])
        for msg in records[-limit:] if limit else []:
            _show(msg, decoder, fmt)
        return
    while True:
        for msg in consumer.consume(100, 0.5):
            if msg.error() is None:
                _show(msg, decoder, fmt)


def _drain(consumer: Consumer) -> list[Message]:
    ends = {}
    for tp in consumer.assignment():
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        ends[tp.partition] = high
    pending = {p for p, high in ends.items() if high > 0}
    records: list[Message] = []
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is not None:
                continue
            records.append(msg)
            partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
            if offset + 1 >= ends[partition]:
                pending.discard(partition)
        for tp in consumer.position(consumer.assignment()):
            if tp.offset >= ends.get(tp.partition, 0):
                pending.discard(tp.partition)
    return records


class _Decoder:
    def __init__(self, store: SchemaStore) -> None:
        self.store = store
        self._codecs: dict[str, SingleObjectCodec] = {}

    def decode(self, msg: Message) -> tuple[str | None, Any, str | None]:
        raw = msg.value() or b""
        name = _header_text(msg, "streamflow-schema") or self._by_fingerprint(raw)
        if not name or name not in self.store:
            return name or None, None, "no known schema"
        codec = self._codecs.get(name) or SingleObjectCodec(self.store.get(name), store=self.store)
        self._codecs[name] = codec
        try:
            return name, codec.decode(raw), None
        except DecodeError as exc:
            return name, None, str(exc)

    def _by_fingerprint(self, raw: bytes) -> str:
        if len(raw) >= 10 and raw[:2] == MAGIC:
            schema = self.store.by_fingerprint(int.from_bytes(raw[2:10], "little"))
            return schema.name if schema else ""
        return ""


def _show(msg: Message, decoder: _Decoder, fmt: str) -> None:
    schema, value, error = decoder.decode(msg)
    raw_key = msg.key()
    key = raw_key.decode("utf-8", "replace") if isinstance(raw_key, bytes) else raw_key
    headers = {k: _text(v) for k, v in msg.headers() or ()}  # type: ignore[misc,str-unpack,unused-ignore]
    record = {
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": dt.datetime.fromtimestamp(msg.timestamp()[1] / 1000, dt.UTC).isoformat(),
        "key": key,
        "schema": schema,
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
    if error is None:
        line.append(json.dumps(value, default=_json_default))
    else:
        line.append(f"<undecodable: {error}> {(msg.value() or b'')[:64]!r}", style="red")
    output.console().print(line)
    extra = {k: v for k, v in headers.items() if k != "streamflow-schema"}
    if extra:
        output.console().print(Text(f"    headers: {extra}", style="dim"))


def _text(value: str | bytes | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _header_text(msg: Message, name: str) -> str:
    for key, value in msg.headers() or ():  # type: ignore[misc,str-unpack,unused-ignore]
        if key == name:
            return _text(value)
    return ""


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def register(app: typer.Typer) -> None:
    app.command("tail")(tail)
