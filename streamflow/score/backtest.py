"""Backtests: recorded traffic replayed through the stable model and a candidate, offline.

``streamflow model rollout backtest`` reads a range of a serving streamlet's input topic
(by time, at most ``limit`` records, partition by partition in offset order) and serves
it twice, once with each version, through the streamlet's own logic: its class, its
blueprint config and the runtime's own batch loop, in memory
(:class:`~streamflow.testkit.StreamletHarness`), so that a backtest runs the code path
the live stream runs, with nothing written to Kafka. The outputs of each version are
written as JSON lines in input order (without ``latency_ms``, the one field that is
not a function of the input), with a report: records, dead letters, classes, accuracy
where the input carries labels, and the two versions' agreement and distance. Two runs
over the same range write byte-identical files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from streamflow.blueprint.model import Application
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.kinds import ModelState
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore
from streamflow.streamlets.rollout.tally import js_distance
from streamflow.testkit import StreamletHarness

__all__ = ["BacktestError", "Recorded", "read_range", "run_backtest"]

DESCRIPTOR = "streamflow.ml.ModelDescriptor"
_UNSTABLE_FIELDS = ("latency_ms",)  # not a function of the input: left out of the outputs
_LOAD_TIMEOUT_S = 300.0
_IDLE_S = 60.0  # a partition that gives nothing for this long, short of its end, is stuck


class BacktestError(Exception):
    """A backtest that cannot run, in a sentence."""


@dataclasses.dataclass(frozen=True)
class Recorded:
    """One input record as it was read: where it was, its key, and its decoded value."""

    partition: int
    offset: int
    key: str | None
    value: dict[str, Any]


def read_range(
    app: Application,
    clients: KafkaClients,
    streamlet: str,
    *,
    start: dt.datetime | None,
    end: dt.datetime | None,
    limit: int,
    progress: Callable[[int], None] = lambda n: None,
) -> tuple[str, list[Recorded], int]:
    """The serving streamlet's input topic, the records of it between ``start`` and ``end``
    (at most ``limit``, the earliest of each partition first), and how many did not decode."""
    descriptor = app.descriptor(streamlet)
    if len(descriptor.inlets) != 1:
        raise BacktestError(f"{streamlet} reads {len(descriptor.inlets)} data inlets, not one")
    inlet = descriptor.inlets[0]
    topic = app.topic_for(streamlet, inlet.name)
    if topic is None:
        raise BacktestError(f"{streamlet}.{inlet.name} is not connected to a topic")
    codec = Codecs(app, SchemaStore(app.schema_paths)).for_topic(
        topic, inlet.schema, producing=False
    )
    consumer = clients.reader(client_id="streamflow-backtest")
    try:
        meta = consumer.list_topics(topic.name, timeout=30).topics.get(topic.name)
        if meta is None or meta.error is not None:
            raise BacktestError(f"topic {topic.name} does not exist")
        partitions = sorted(meta.partitions)
        ends = _offsets(consumer, topic.name, partitions, end)
        starts = _offsets(consumer, topic.name, partitions, start, earliest=True)
        found: list[Recorded] = []
        undecodable = 0
        for partition in partitions:
            first, last = starts[partition], ends[partition]
            if first >= last:
                continue
            consumer.assign([TopicPartition(topic.name, partition, first)])
            position, idle_since = first, time.monotonic()
            while position < last and len(found) < limit:
                messages = consumer.consume(500, 1.0)
                if not messages:
                    # read_committed: markers and aborted records take offsets of their own
                    at = consumer.position([TopicPartition(topic.name, partition)])[0].offset
                    if at is not None and at > position:
                        position, idle_since = at, time.monotonic()
                    elif time.monotonic() - idle_since > _IDLE_S:
                        raise BacktestError(
                            f"{topic.name}[{partition}] gave nothing past offset {position} "
                            f"for {_IDLE_S:.0f}s (an open transaction?); try an earlier --to"
                        )
                    continue
                idle_since = time.monotonic()
                for msg in messages:
                    offset = msg.offset()
                    if msg.error() is not None or offset is None or offset >= last:
                        continue
                    position = offset + 1
                    try:
                        value = codec.decode(msg.value() or b"")
                    except Exception:
                        undecodable += 1
                        continue
                    raw = msg.key()
                    key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
                    found.append(Recorded(partition, offset, key, value))
                    if len(found) >= limit:
                        break
                progress(len(found))
        return topic.name, found, undecodable
    finally:
        consumer.close()


def _offsets(
    consumer: Consumer,
    topic: str,
    partitions: Sequence[int],
    at: dt.datetime | None,
    *,
    earliest: bool = False,
) -> dict[int, int]:
    """Each partition's offset at time ``at`` (None: its beginning, or its end now)."""
    if at is None:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[0 if earliest else 1]
            for p in partitions
        }
    wanted = [TopicPartition(topic, p, int(at.timestamp() * 1000)) for p in partitions]
    found = consumer.offsets_for_times(wanted, timeout=30)
    out = {}
    for tp in found:
        # no record at or after the time: the end of the partition
        out[tp.partition] = (
            tp.offset
            if tp.offset >= 0
            else consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), 30)[1]
        )
    return out


def run_backtest(
    app: Application,
    streamlet: str,
    records: Sequence[Recorded],
    versions: Mapping[str, ModelDescriptor],
    *,
    out_dir: Path,
    label_field: str = "label",
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Serve ``records`` with each of ``versions`` (``{"stable": ..., "candidate": ...}``),
    write ``<role>.jsonl`` and ``report.json`` into ``out_dir``; the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    class_field = str(app.streamlets[streamlet].config.get("class_field", "predicted"))
    served: dict[str, list[dict[str, Any] | None]] = {}
    report: dict[str, Any] = {
        "app": app.name,
        "streamlet": streamlet,
        "records": len(records),
        "versions": {},
    }
    for role, model in versions.items():
        say(f"serving {len(records)} records with {role} {model.tag}")
        outputs, dead = _serve(app, streamlet, model, records)
        served[role] = outputs
        lines = [
            json.dumps(
                {
                    "partition": r.partition,
                    "offset": r.offset,
                    "key": r.key,
                    "output": _stable(out) if out is not None else None,
                },
                sort_keys=True,
                default=str,
            )
            for r, out in zip(records, outputs, strict=True)
        ]
        (out_dir / f"{role}.jsonl").write_text("".join(line + "\n" for line in lines))
        report["versions"][role] = _summary(model, records, outputs, dead, class_field, label_field)
    roles = list(versions)
    if len(roles) == 2:
        first, second = (served[r] for r in roles)
        both = [
            (a, b) for a, b in zip(first, second, strict=True) if a is not None and b is not None
        ]
        agreed = sum(1 for a, b in both if a.get(class_field) == b.get(class_field))
        report["compared"] = len(both)
        report["agreement"] = agreed / len(both) if both else None
        report["distance"] = js_distance(
            report["versions"][roles[0]]["classes"], report["versions"][roles[1]]["classes"]
        )
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def _serve(
    app: Application, streamlet: str, model: ModelDescriptor, records: Sequence[Recorded]
) -> tuple[list[dict[str, Any] | None], int]:
    """Each record's output from ``model`` through the streamlet's logic (None: a dead
    letter), and how many were dead-lettered."""
    descriptor = app.descriptor(streamlet)
    control = next((p for p in descriptor.control_inlets if p.schema == DESCRIPTOR), None)
    if control is None:
        raise BacktestError(f"{streamlet} has no control inlet for {DESCRIPTOR}")
    inlet = descriptor.inlets[0].name
    outlet = descriptor.columns_outlet or "out"
    with tempfile.TemporaryDirectory(prefix="streamflow-backtest-") as cache:
        config = {**app.streamlets[streamlet].config, "cache_dir": cache}
        config = {k: v for k, v in config.items() if descriptor.param(k) is not None}
        harness = StreamletHarness(
            descriptor.cls, config=config, store=SchemaStore(app.schema_paths), name=streamlet
        )
        with harness as h:
            h.control(control.name, model.to_record(), key=model.name)
            _loaded(h, model)
            h.clear()
            # each record keyed by its place in the input, so outputs line up with it
            h.feed(inlet, [r.value for r in records], keys=[str(i) for i in range(len(records))])
            h.run()
            outputs: list[dict[str, Any] | None] = [None] * len(records)
            for key, value in h.outputs(outlet):
                if key is not None and key.isdigit():
                    outputs[int(key)] = value
            return outputs, len(h.dead_letters)


def _loaded(h: StreamletHarness, model: ModelDescriptor) -> None:
    deadline = time.monotonic() + _LOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        for out in h.between_batches():
            value = out.value
            if out.outlet != "status" or value.get("version") != model.version:
                continue
            if value.get("state") == str(ModelState.SERVING):
                return
            if value.get("state") in (str(ModelState.FAILED), str(ModelState.REJECTED)):
                raise BacktestError(f"{model.tag} did not load: {value.get('message', '')}")
        time.sleep(0.05)
    raise BacktestError(f"{model.tag} did not load in {_LOAD_TIMEOUT_S:.0f}s")


def _stable(output: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in output.items() if k not in _UNSTABLE_FIELDS}


def _summary(
    model: ModelDescriptor,
    records: Sequence[Recorded],
    outputs: Sequence[dict[str, Any] | None],
    dead: int,
    class_field: str,
    label_field: str,
) -> dict[str, Any]:
    classes: dict[str, int] = {}
    labelled = correct = 0
    for record, out in zip(records, outputs, strict=True):
        if out is None:
            continue
        predicted = out.get(class_field)
        classes[str(predicted)] = classes.get(str(predicted), 0) + 1
        label = record.value.get(label_field)
        if label is not None and predicted is not None:
            labelled += 1
            correct += int(label == predicted)
    return {
        "model": model.tag,
        "served": sum(1 for out in outputs if out is not None),
        "dead_letters": dead,
        "classes": dict(sorted(classes.items())),
        "labelled": labelled,
        "accuracy": correct / labelled if labelled else None,
    }
