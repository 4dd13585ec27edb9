"""Model versions for a running application: push one, and hear what each replica serves.

The use case behind ``streamflow model push`` and ``model status``, as values
and exceptions rather than printing, so that other callers (a rollout, a test)
drive it as the CLI does:

* :class:`ModelChannel` is one serving streamlet's control topic (where
  ``ModelDescriptor`` records go, keyed by model name) and status topic (where
  each replica says ``loading``, then ``serving``, ``failed`` or ``rejected``),
  each with the codec its topic's format calls for
  (:class:`~streamflow.runtime.codecs.Codecs`), as the replicas use them;
* :meth:`ModelChannel.push` reads the descriptors pushed so far, picks the
  version (the newest of that model + 1, unless given), packs the artifact and
  writes the descriptor; :func:`await_statuses` then reads the status topic from
  where it ended before the push, so only reports about this push count, until
  every replica running has given a final one or the time is up.

How many replicas to wait for is asked of the deployment (:func:`replica_count`),
again every few seconds while waiting: an autoscaler runs more or fewer than the
spec's ``replicas`` (only its starting count), and may change its mind meanwhile.

What this module refuses is a :class:`ModelPushError` with a sentence (and a
hint), raised before anything is written where it can be known then; Kafka's and
the registry's own errors pass through, for the caller to word.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.models.descriptor import ModelDescriptor, build_descriptor
from streamflow.models.kinds import FINAL_STATES, ModelState
from streamflow.operator import targets
from streamflow.runtime import kafka_access
from streamflow.runtime.clients import KafkaClients, watermarks
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore
from streamflow.schema.codecs import Codec, DecodeError

__all__ = [
    "DESCRIPTOR",
    "STATUS",
    "ModelChannel",
    "ModelPushError",
    "PushRequest",
    "Pushed",
    "await_statuses",
    "latest_statuses",
    "produce_descriptors",
    "replica_count",
    "serving_streamlets",
    "unserved",
]

DESCRIPTOR = "streamflow.ml.ModelDescriptor"
STATUS = "streamflow.ml.ModelStatus"
_RECOUNT_S = 2.0  # how often the number of replicas running is asked again
_READ_ALL_S = 30.0  # the longest a (small, compacted) topic is read for
_MAX_DESCRIPTOR_BYTES = 16 * 1024 * 1024


class ModelPushError(Exception):
    """A push that cannot be done, in a sentence; ``hint`` says what to do instead."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


@dataclasses.dataclass(frozen=True)
class PushRequest:
    """A new model version: an artifact (``(form, path)``) or a model server's ``url``."""

    artifact: tuple[str, Path] | None = None
    url: str | None = None
    protocol: str = "v2"
    version: int | None = None  # default: the newest of the model on the topic + 1
    name: str | None = None  # default: the model served now, else the artifact's stem
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    by_reference: bool = False
    description: str = ""

    def descriptor(self, model: str, version: int) -> ModelDescriptor:
        """The descriptor of this request as ``model:version`` (the artifact packed)."""
        return build_descriptor(
            model,
            version,
            artifact=self.artifact,
            url=self.url,
            protocol=self.protocol,
            parameters=dict(self.parameters),
            by_reference=self.by_reference,
            description=self.description,
        )


@dataclasses.dataclass(frozen=True)
class Pushed:
    """What was written, and where the status topic ended before it was."""

    model: str
    version: int
    kind: str
    size: int  # the artifact's bytes carried in the descriptor (0: by reference or a URL)
    topic: str
    status_start: dict[int, int]
    role: str = "stable"  # whose statuses tell of it: the stable model's, or a candidate's


class ModelChannel:
    """One serving streamlet's control and status topics, with their codecs.

    Made before anything is written: the descriptor's schema id is resolved (or
    registered) and the statuses' codec made here, so a registry problem stops a
    push, not its wait.
    """

    def __init__(self, app: Application, clients: KafkaClients, streamlet: str) -> None:
        self.app, self.clients, self.streamlet = app, clients, streamlet
        self.control, self.status = model_topics(app, streamlet)
        codecs = Codecs(app, SchemaStore(app.schema_paths))
        self.descriptors = _codec(codecs, self.control, DESCRIPTOR, producing=True)
        self.statuses = (
            _codec(codecs, self.status, STATUS, producing=False) if self.status else None
        )

    def history(self) -> list[dict[str, Any]]:
        """Every descriptor pushed so far, oldest first."""
        return read_all(self.clients, self.control.name, self.descriptors)

    def push(self, request: PushRequest) -> Pushed:
        """Write the next version's descriptor; what was written."""
        history = self.history()
        stem = request.artifact[1].stem if request.artifact else "model"
        model = request.name or (history[-1]["name"] if history else stem)
        newest = max((d["version"] for d in history if d["name"] == model), default=0)
        version = request.version if request.version is not None else newest + 1
        descriptor = request.descriptor(model, version)
        start = end_offsets(self.clients, self.status.name) if self.status else {}
        record = self.descriptors.encode(descriptor.to_record())
        produce_descriptors(self.clients, self.control.name, [(model, record)])
        return Pushed(
            model=model,
            version=version,
            kind=str(descriptor.kind),
            size=len(descriptor.data or b""),
            topic=self.control.name,
            status_start=start,
        )


def model_topics(app: Application, streamlet: str) -> tuple[TopicSpec, TopicSpec | None]:
    """A serving streamlet's control topic and its status topic (None when it has none)."""
    if streamlet not in app.streamlets:
        raise ModelPushError(
            f"application {app.name!r} has no streamlet {streamlet!r}",
            hint=f"streamlets: {', '.join(app.streamlets)}",
        )
    descriptor = app.descriptor(streamlet)
    control = next((p for p in descriptor.control_inlets if p.schema == DESCRIPTOR), None)
    if control is None:
        raise ModelPushError(
            f"{streamlet!r} has no control inlet for {DESCRIPTOR}; it does not serve models"
        )
    topic = app.topic_for(streamlet, control.name)
    if topic is None:
        raise ModelPushError(
            f"{streamlet}.{control.name} is not connected to a topic in the blueprint"
        )
    status_port = next((p for p in descriptor.outlets if p.schema == STATUS), None)
    return topic, app.topic_for(streamlet, status_port.name) if status_port else None


def serving_streamlets(app: Application) -> list[str]:
    """The streamlets that take model descriptors on a control inlet."""
    return [
        n
        for n in app.streamlets
        if any(p.schema == DESCRIPTOR for p in app.descriptor(n).control_inlets)
    ]


def latest_statuses(
    app: Application, clients: KafkaClients, streamlet: str | None = None
) -> dict[str, dict[str, Any]]:
    """Each replica's latest serving record, with the latest other event beside it; a
    rollout's candidate is a row of its own (``<replica> (candidate)``)."""
    codecs = Codecs(app, SchemaStore(app.schema_paths))
    latest: dict[str, dict[str, Any]] = {}
    for name in [streamlet] if streamlet else serving_streamlets(app):
        _, status_topic = model_topics(app, name)
        if status_topic is None:
            continue
        codec = _codec(codecs, status_topic, STATUS, producing=False)
        for record in read_all(clients, status_topic.name, codec):
            row = record["replica"]
            if record.get("role") == "candidate":
                row = f"{row} (candidate)"
            previous = latest.get(row)
            serving = ModelState.SERVING
            if record["state"] == serving or previous is None or previous["state"] != serving:
                latest[row] = record
            else:
                latest[row] = {
                    **previous,
                    "last_event": f"{record['state']} v{record['version']}: {record['message']}",
                }
    return latest


def replica_count(
    target: targets.Target | None, app: Application, streamlet: str
) -> Callable[[], int]:
    """How many replicas of ``streamlet`` run now, as the deployment (and its autoscaler) says.

    The spec's ``replicas`` is only where an autoscaler starts; without a
    deployment (nothing runs it here), it is all there is. While waiting, a
    status that cannot be read keeps the last count known.
    """
    known = app.streamlets[streamlet].replicas

    def count() -> int:
        nonlocal known
        if target is None:
            return known
        try:
            found = target.status(app.name)
        except targets.TargetError:
            return known
        desired = {s.name: s.desired for s in found.streamlets}
        known = desired.get(streamlet, known)
        return known

    return count


#: Told while waiting: each replica's latest state for the version, and how many run.
Progress = Callable[[Mapping[str, str], int], None]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a wait ended: each replica's final record (a stand-in, for an expected one that
    gave none in time), and the replicas expected at the end (as many as ran)."""

    statuses: dict[str, dict[str, Any]]
    expected: tuple[str, ...]

    @property
    def replicas(self) -> int:
        return len(self.expected)

    @property
    def served(self) -> bool:
        """Whether every replica expected serves the version (one that was scaled away
        meanwhile may have said otherwise)."""
        return self.reached(ModelState.SERVING)

    def reached(self, goal: ModelState) -> bool:
        """Whether every replica expected is in state ``goal`` for the version."""
        return bool(self.expected) and all(self.statuses[r]["state"] == goal for r in self.expected)


def await_statuses(
    channel: ModelChannel,
    pushed: Pushed,
    *,
    timeout: float,
    replicas: Callable[[], int],
    count: int | None = None,
    progress: Progress = lambda _states, _count: None,
) -> Outcome:
    """Read the status topic from before the push until every running replica has given
    a final word on the version, or ``timeout`` seconds have passed.

    ``replicas`` says how many run (asked again while waiting); ``count`` is its answer
    when the caller has just asked. ``progress`` is told each replica's latest state.
    """
    if channel.status is None or channel.statuses is None:
        raise ModelPushError(f"{channel.streamlet!r} has no status topic to wait on")
    count, counted = (replicas() if count is None else count), time.monotonic()
    final: dict[str, dict[str, Any]] = {}
    states: dict[str, str] = {}  # replica -> the latest state it reported for this version
    reader = reader_of(channel.clients)
    topic = channel.status.name
    reader.assign([TopicPartition(topic, p, o) for p, o in pushed.status_start.items()])
    deadline = time.monotonic() + timeout
    expected = _expected(channel.streamlet, count, states)
    try:
        while not all(r in final for r in expected) and time.monotonic() < deadline:
            for msg in reader.consume(100, 0.5):
                if msg.error() is not None or msg.value() is None:
                    continue
                try:
                    record = channel.statuses.decode(msg.value())  # type: ignore[arg-type]
                except DecodeError:
                    continue  # not a status (the topic is the streamlet's own): not ours
                role = record.get("role") or "stable"  # none: written before rollouts
                if (record["model"], record["version"], role) == (
                    pushed.model,
                    pushed.version,
                    pushed.role,
                ):
                    states[record["replica"]] = record["state"]
                    if record["state"] in FINAL_STATES:
                        final[record["replica"]] = record
            expected = _expected(channel.streamlet, count, states)
            if time.monotonic() - counted >= _RECOUNT_S or all(r in final for r in expected):
                # before ending, make sure no replica was added meanwhile
                count, counted = replicas(), time.monotonic()
                expected = _expected(channel.streamlet, count, states)
            progress(states, count)
    finally:
        reader.close()
    for replica in expected:
        if replica not in final:
            final[replica] = {
                "replica": replica,
                "model": pushed.model,
                "version": pushed.version,
                "state": states.get(replica, "no report"),
                "message": f"no final report within {timeout:g}s",
                "time": None,
            }
    return Outcome(final, tuple(expected))


def unserved(
    statuses: Mapping[str, Mapping[str, Any]], goal: ModelState = ModelState.SERVING
) -> list[str]:
    """``replica (state: message)`` for each replica that does not serve the version (is
    not in state ``goal``)."""
    return [
        f"{replica} ({s['state']}: {s['message']})" if s["message"] else f"{replica} ({s['state']})"
        for replica, s in sorted(statuses.items())
        if s["state"] != goal
    ]


def _expected(streamlet: str, replicas: int, heard: Mapping[str, Any]) -> list[str]:
    """The replicas to hear from: ``classifier-0`` ... as the local target names them.
    Where replicas name themselves otherwise (on Kubernetes, by their pod's name hashed),
    the ones heard from, then a stand-in for each of ``replicas`` still silent."""
    indexed = [f"{streamlet}-{index}" for index in range(replicas)]
    if all(name in indexed for name in heard):
        return indexed
    silent = max(0, replicas - len(heard))
    return sorted(heard) + [
        f"{streamlet} (replica {n + 1} of {silent} unheard)" for n in range(silent)
    ]


def reader_of(clients: KafkaClients) -> Consumer:
    """A reader configured as the application's replicas are (TLS, SASL), committing nothing."""
    return clients.reader(client_id="streamflow-cli")


def end_offsets(clients: KafkaClients, topic: str) -> dict[int, int]:
    """Where each partition of ``topic`` ends now."""
    return ends_of(clients, [topic])[topic]


def ends_of(clients: KafkaClients, topics: Sequence[str]) -> dict[str, dict[int, int]]:
    """Where each partition of each of ``topics`` ends now, asked by one client."""
    consumer = reader_of(clients)
    try:
        found = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            found[topic] = {
                p: watermarks(consumer, TopicPartition(topic, p))[1] for p in meta.partitions
            }
        return found
    finally:
        consumer.close()


def read_all(clients: KafkaClients, topic: str, codec: Codec) -> list[dict[str, Any]]:
    """Every decodable record of a (small, compacted) topic, oldest first."""
    return read_range(clients, topic, codec)[0]


def read_range(
    clients: KafkaClients, topic: str, codec: Codec, start: Mapping[int, int] | None = None
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The decodable records of ``topic`` from ``start`` (each partition's offset; its
    beginning when not given) to where it ends now, oldest first; and where the read got
    to in each partition (its end, unless the read ran out of time first)."""
    consumer = reader_of(clients)
    records: list[tuple[int, dict[str, Any]]] = []
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {p: watermarks(consumer, TopicPartition(topic, p)) for p in meta.partitions}
        first = {p: max(low, (start or {}).get(p, 0)) for p, (low, _) in ends.items()}
        pending = {p for p, (_, high) in ends.items() if high > first[p]}
        consumer.assign([TopicPartition(topic, p, first[p]) for p in meta.partitions])
        deadline = time.monotonic() + _READ_ALL_S
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None or msg.value() is None:
                    continue
                with contextlib.suppress(ValueError):  # not a descriptor: not ours to show
                    records.append((msg.timestamp()[1], codec.decode(msg.value())))  # type: ignore[arg-type]
                partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
                if offset + 1 >= ends[partition][1]:
                    pending.discard(partition)
            for tp in consumer.position(consumer.assignment()):
                if tp.offset >= ends[tp.partition][1]:
                    pending.discard(tp.partition)
        reached = {p: high for p, (_, high) in ends.items()}
        if pending:  # out of time: where each partition still short of its end got to
            for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                reached[tp.partition] = max(first[tp.partition], tp.offset)
    finally:
        consumer.close()
    ordered = [r for _, r in sorted(records, key=lambda item: item[0])]
    return ordered, reached


def _codec(codecs: Codecs, topic: TopicSpec, schema: str, *, producing: bool) -> Codec:
    """The codec of ``topic``'s format; a producing one has its schema id at hand."""
    try:
        return codecs.for_topic(topic, schema, producing=producing)
    except RuntimeError as exc:  # no registry configured, or its client not installed
        raise ModelPushError(f"{topic.name} ({topic.format}): {exc}") from None


def produce_descriptors(
    clients: KafkaClients, topic: str, records: list[tuple[str, bytes]]
) -> None:
    """Write encoded descriptors (key, value), in this order, and wait until Kafka has them."""
    errors: list[KafkaError] = []
    large: dict[str, Any] = {"message.max.bytes": _MAX_DESCRIPTOR_BYTES}
    producer = clients.producer(client_id="streamflow-model-push", **large)
    for key, value in records:
        producer.produce(
            topic,
            value,
            key.encode(),
            headers=[("streamflow-schema", DESCRIPTOR.encode())],
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    try:
        unsent = producer.flush(30)
    except (KafkaException, SystemError) as exc:  # confluent-kafka raises fatal errors here
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__
        if not isinstance(cause, KafkaException):
            raise
        errors.insert(0, cause.args[0])
        unsent = 0
    if unsent or errors:
        denial = errors and kafka_access.describe_denial(errors[0], clients.config, topic=topic)
        reason = errors[0].str() if errors else "timed out"
        raise ModelPushError(denial or f"could not write the descriptor to {topic}: {reason}")
